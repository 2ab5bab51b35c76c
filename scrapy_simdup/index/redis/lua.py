"""The server-side half of the Redis index: one Lua script, check-and-insert.

Layout under a base key ``B`` (the key prefix: in a crawl, ``SIMDUP_REDIS_KEY``
with the spider name). A page has two 64-bit keys and a 32-byte sketch
(``fingerprint.sketch``); ``<h1>`` and ``<h2>`` are the top ``t`` bits of its
keys (lower-case hex, ``ceil(t / 4)`` digits):

``B:b:<h1>``  key-1 bucket: one Redis string of 40-byte records, key 1
              (uint64 LE) then the sketch, in insertion order.
``B:c:<h2>``  key-2 bucket: 14-byte records, key 2 (uint64 LE), then the
              header ``<h1>`` and the position (in records) of the page's
              record in ``B:b:<h1>`` (uint24 LE each): where its key 1 and
              sketch are.
``B:u:<h1>``  the keys (URLs) of the pages of ``B:b:<h1>``, in the same order:
              each a uint16 LE length, a flag byte and the UTF-8 bytes:
              the flag is 1 when the page was stored as a near-duplicate
              (it matched a stored page), 0 when it was kept (it matched
              nothing).
``B:n``       number of pages inserted (an integer string): the index size
              and the insertion sequence number.
``B:log``     the most recent insertions, in order, one entry each: both
              headers (``2d`` hex digits) and the 8-byte token of the
              ``check_and_add_many`` call that made it; entries
              ``B:n - len/(2d+8) + 1 .. B:n``. Trimmed to the last
              ``LOG_KEEP`` bytes when it passes ``LOG_MAX``.
``B:id``      a token naming this incarnation of the index; a Redis that
              lost its data (restart without persistence, FLUSHDB) has no
              ``B:id`` or a new one, which tells writers their snapshot is
              from another life.
``B:t``       the header size ``t``, fixed when the index is created.
``B:v``       the layout (``FORMAT``): an index without it was written by
              an older version, whose buckets hold no sketches; layout 2
              did not record which pages were kept.
``B:fingerprint``  the ``Fingerprinter.version`` of the pages.

54 bytes a page (URLs apart: each takes 3 bytes more in ``B:u``, its length and
flag): 40 in ``B:b``, 14 in ``B:c``; plus Redis' own
cost of the ``3 * 2**t`` bucket keys (about 70 bytes each), which is fixed.
Buckets are append-only (written with SET of old + new: an exact-size
string, where APPEND would leave up to 100 % growth slack). The kept flag
rides in the key list (one byte a page beside its key).

A key met again (the rule of ``MemoryBackend``): its *own entry* is the last
record stored under the same key in the page's own key-1 bucket ``B:b:<h1>``
(``B:u:<h1>`` names it). If that page was kept and its record is still a
verified match of the page (a candidate by either key in the probed buckets,
the sketch agreeing), the page is a *revisit*: the match names its own key.
Otherwise the own record is never its match: the page is matched against the
other stored pages and reported as a near-duplicate of the best of them (or
new), and it is stored again only when its own page was kept (its content
changed past it). A key whose key 1 moved to another bucket has no own entry
there: it is checked as a new key; when its best match is a record of the
same key (its old self), it is not stored again, and that record is its own
entry: kept, it is a revisit; a near-duplicate, the client checks the page
again with that record set apart.

The match rule (``index.verified``): a stored page is a candidate when key 1
is within ``h`` bits of the query's key 1, or key 2 of its key 2, in a probed
bucket; it is a match when at least ``needed`` bytes of the sketches agree.
The best match has the most agreeing bytes, then the smaller distance.

Protocol (two round trips for a batch of pages, one for a batch of
duplicates or revisits; three when a key-2 candidate's key-1 bucket was not
read):

1. *Snapshot*: ``MGET B:n B:id <probed key-1 buckets> <probed key-2
   buckets>``: one atomic command; in the same pipeline, after it,
   ``OWN_AT``: the position and kept flag of each page's own entry in its
   own key-1 bucket. Records and key lists are append-only, so an entry it
   finds stays; one it does not find was not stored at the snapshot, and
   one stored later is logged (``B:log``) after the snapshot: the script
   looks again in exactly those buckets.
2. *Local check* in the compiled core: a candidate with a verified match in
   the snapshot is a duplicate (the match was in the index at the snapshot's
   instant: the answer is linearisable there). The page's own record (by
   its position from ``OWN_AT``) is set apart: a kept one that verifies
   makes the page a revisit, decided here (also linearisable at the
   snapshot: the record was in it, and records never change). A key-2
   record names the key-1
   record that holds its sketch; when that key-1 bucket was not in the
   snapshot it is read (``MGET B:id <buckets>``) and the check repeated.
   Records are never changed once written, and both records of a page are
   written by the same script, so the later read holds the record the
   snapshot's key-2 record names (unless the index was reset meanwhile:
   ``B:id`` tells, and the script then checks everything).
3. *Check-and-insert* (this script) for the others, with, per candidate, its
   keys and sketch, its probed buckets of each key (own bucket first), the
   byte length each had in the snapshot, and its best match in the snapshot
   if it has one: a page matched in the snapshot goes to the script only when
   an earlier page of the same call (not in the snapshot) may be a better
   match, so that the best match is the one a sequential check would name.

Why the script's answer equals a sequential one (atomic across processes):
a Lua script runs atomically on the Redis server. Buckets are append-only, so
a bucket whose current length equals its snapshot length has exactly the
content the client checked, and a bucket that grew has the checked prefix plus
a tail: the script checks only tails, with the same rule as the client
(distance ``h`` on the bucket's key, then the sketch; a key-2 record's sketch
is read from the key-1 record it names). Every insertion increments ``B:n``
and logs both its headers in the same script, so the buckets written since
the snapshot are those of the last ``n_now - n_snap`` log entries: only those
buckets (and the ones this very script call appended to, which also resolves
near-duplicate pages *within* one batch) can have tails. Insertions logged by
*other* writers (another token) are always re-checked. The call's own
insertions (its earlier chunk still in flight, earlier pages of the same
script call) are re-checked only for the candidates the client flagged: the
client knows their keys and computes which of them land in a candidate's
probed buckets within ``h`` (of either key); for an unflagged candidate none
of them can be a candidate, so skipping them changes nothing. If the log no
longer reaches back to the snapshot, or the index was reset (``B:id``
changed or ``B:n`` went down), every probed bucket is checked, from its start
when it is shorter than in the snapshot. So at the instant the script runs
the page is compared with every page in its probed buckets, and is inserted
only if none is a verified match: of two processes that meet two
near-duplicate pages at the same moment, the second script to run sees the
first one's insertion and reports a duplicate (exactly one kept), as long as
one probes the other's bucket by one of the keys (the PSM recall condition,
the same as for two pages in one process).

With ``dups`` (the default of the store, as the in-memory backend does), a
near-duplicate is inserted too, under its own key (URL) and flagged as one,
so that a later copy closer to it than to the first one is still found, and
a match names the stored page it resembles most. Every page but a local
revisit then goes to the script (with its best other match and its own
record's verification in the snapshot, if any). The script finds the own
entry again where it may have changed since ``OWN_AT`` (a bucket logged since
the snapshot, or everything after a reset) and in its own insertions, sets
the own record apart in the tails exactly as the client did in the snapshot,
and applies the rule above.

Reply: one item per candidate, ``0`` when inserted as new (no match), ``-1``
when not inserted and no match (a near-duplicate met again whose only match
was itself), else ``{key 1 (8 bytes), distance, key or "", agreeing sketch
bytes, 1 if inserted too}``, or ``{..., 2, header, position}`` when the best
match is a near-duplicate record of the page's own key in another key-1
bucket (its key 1 moved): nothing is done, and the client checks the page
again with that record as its own entry (header ``ohead``, position and flag
in ``lown``).
"""

#: the start of the script's error reply when the index was re-created with
#: other settings than the writer's (header bits, fingerprint recipe, layout)
SETTINGS_MISMATCH = "SIMDUP-SETTINGS"

#: the layout of the buckets (``B:v``): two keys and the sketch, kept flags
FORMAT = "3"
#: longest key stored (its length is a uint16)
MAX_KEY_BYTES = (1 << 16) - 1
#: bytes of a key-1 record (key 1, sketch) and of a key-2 record (key 2, key 1, position)
RECORD1, RECORD2 = 40, 14
#: most records a key-1 bucket can hold (positions are 24-bit)
MAX_BUCKET_RECORDS = 1 << 24

LOG_MAX = 1 << 18       # bytes of log before trimming (7,281 insertions with t = 14)
LOG_KEEP = 1 << 17      # bytes kept after trimming (whole entries)

# The Lua function both scripts use to find a page's own entry in a bucket's
# key list (inserted into each script's text below).
_OWN_IN = r"""
-- the own entry of key url in key list s: 2 * its index, + 1 if stored as
-- a near-duplicate (the last entry of url), or -1
local function own_in(s, url)
  if url == '' or not string.find(s, url, 1, true) then return -1 end
  local size, pos, k, found, n = #s, 1, 0, -1, #url
  while pos + 2 <= size do
    local lo, hi, flag = string.byte(s, pos, pos + 2)
    local len = lo + hi * 256
    if len == n and string.sub(s, pos + 3, pos + 2 + len) == url then
      found = 2 * k + (flag == 1 and 1 or 0)
    end
    pos, k = pos + 3 + len, k + 1
  end
  return found
end
"""

CHECK_AND_INSERT = r"""
local base = ARGV[1]
local h = tonumber(ARGV[2])
local n_snap = tonumber(ARGV[3])
local id_snap = ARGV[4]
local w = tonumber(ARGV[5])
local vals1, vals2, sketches = ARGV[6], ARGV[7], ARGV[8]
local counts1, counts2 = ARGV[9], ARGV[10]
local bk1, bl1, pi1 = ARGV[11], ARGV[12], ARGV[13]
local bk2, bl2, pi2 = ARGV[14], ARGV[15], ARGV[16]
local id_new = ARGV[17]
local flags, tok = ARGV[18], ARGV[19]
local needed = tonumber(ARGV[20])
-- per candidate, its best match in the snapshot, if any: agreeing bytes + 1
-- (0: none), distance, key 1, position (14 bytes) and header (w digits)
local lbest, lhead = ARGV[21], ARGV[22]
-- per candidate, its own entry as OWN_AT found it after the snapshot: own
-- record's agreeing bytes + 1 (0: not a candidate there), distance, key 1,
-- position + 1 (0: none), 1 if stored as a near-duplicate (15 bytes)
local lown = ARGV[23]
-- per candidate, the bucket of its own entry (w digits): its own key-1 bucket,
-- or, when the client decides it again, the bucket its old record moved from
local ohead = ARGV[24]
local dups = ARGV[25] == '1'    -- store near-duplicates too (under their own keys)
local e = 2 * w + 8    -- log entry: both headers' digits, writer token
local bxor, band, rshift = bit.bxor, bit.band, bit.rshift
local byte, sub, unpack = string.byte, string.sub, struct.unpack

local function pop(x)
  x = x - band(rshift(x, 1), 0x55555555)
  x = band(x, 0x33333333) + band(rshift(x, 2), 0x33333333)
  x = band(x + rshift(x, 4), 0x0F0F0F0F)
  x = x + rshift(x, 8)
  x = x + rshift(x, 16)
  return band(x, 0x3F)
end

local function u24(x)
  return string.char(band(x, 255), band(rshift(x, 8), 255), band(rshift(x, 16), 255))
end

-- equal bytes of the query sketch q and the 32 bytes of s at position i
local function agree(q, s, i)
  local a = 0
  for k = 0, 31 do
    if byte(q, k + 1) == byte(s, i + k) then a = a + 1 end
  end
  return a
end

local nkey, logkey, idkey = base .. ':n', base .. ':log', base .. ':id'
local uprefix, bprefix, cprefix = base .. ':u:', base .. ':b:', base .. ':c:'
-- the writer's settings ride in its id (32 hex digits, 2 digits of header
-- bits, the fingerprint recipe): an index Redis lost and that is re-created
-- here records them again, and a writer whose settings differ from the
-- index's is refused instead of mixing incomparable pages
local t_mine, fp_mine = tonumber(sub(id_new, 33, 34)), sub(id_new, 35)
local tkey, fkey, vkey = base .. ':t', base .. ':fingerprint', base .. ':v'
local t_now = redis.call('GET', tkey)
if not t_now then
  redis.call('SET', tkey, tostring(t_mine))
  redis.call('SET', vkey, 'FORMAT')
else
  local v_now = redis.call('GET', vkey)
  if v_now ~= 'FORMAT' then
    return redis.error_reply('SIMDUP-SETTINGS layout ' .. (v_now or '1'))
  end
  if tonumber(t_now) ~= t_mine then
    return redis.error_reply('SIMDUP-SETTINGS header bits ' .. t_now)
  end
end
if fp_mine ~= '' then
  local fp_now = redis.call('GET', fkey)
  if not fp_now then
    redis.call('SET', fkey, fp_mine)
  elseif fp_now ~= fp_mine then
    return redis.error_reply('SIMDUP-SETTINGS fingerprint ' .. fp_now)
  end
end
local hexfmt = '%0' .. w .. 'x'
local id_now = redis.call('GET', idkey)
if not id_now then
  redis.call('SET', idkey, id_new)
  id_now = id_new
end
local n_now = tonumber(redis.call('GET', nkey) or '0')

-- which buckets may have changed since the snapshot
local check_all, from_start = false, false
local changed1, changed2, foreign1, foreign2, has_foreign = {}, {}, {}, {}, false
if id_now ~= id_snap or n_now < n_snap then
  check_all, from_start = true, true
elseif n_now > n_snap then
  local need = n_now - n_snap
  local loglen = redis.call('STRLEN', logkey)
  if need * e > loglen then
    check_all = true
  else
    local log = redis.call('GETRANGE', logkey, loglen - need * e, -1)
    for i = 1, #log, e do
      local hd1, hd2 = sub(log, i, i + w - 1), sub(log, i + w, i + 2 * w - 1)
      changed1[hd1], changed2[hd2] = true, true
      if sub(log, i + 2 * w, i + e - 1) ~= tok then
        foreign1[hd1], foreign2[hd2] = true, true
        has_foreign = true
      end
    end
  end
end

-- the part of a probed bucket the client did not check: its tail past the
-- length the snapshot read (lens: the snapshot's lengths, item j), or all of it
-- when the index was reset or the bucket is shorter than it was; and where
-- that part starts
local function unchecked(key, lens, j)
  local len = redis.call('STRLEN', key)
  local start = unpack('<I4', lens, j * 4 + 1)
  if from_start or len < start then start = 0 end
  if len <= start then return '', start end
  return redis.call('GETRANGE', key, start, len - 1), start
end

-- this call's insertions: records by bucket, written once at the end (exact size)
local own1, own2, touched1, touched2, base1 = {}, {}, {}, {}, {}
local newlog, out = {}, {}

-- the key of entry k (0-based) of a key-1 bucket's key list, and whether
-- its page was kept
local function key_at(hd, k)
  local s = redis.call('GET', uprefix .. hd)
  if not s then return '', true end
  local pos = 1
  for _ = 1, k do
    if pos + 2 > #s then return '', true end
    pos = pos + 3 + unpack('<I2', s, pos)
  end
  if pos + 2 > #s then return '', true end
  local len = unpack('<I2', s, pos)
  return sub(s, pos + 3, pos + 2 + len), byte(s, pos + 2) == 0
end

__OWN_IN__
local inserted = 0
local pp1, pp2 = 0, 0
for c = 1, #vals1 / 8 do
  local lo1, hi1 = unpack('<I4I4', vals1, c * 8 - 7)
  local lo2, hi2 = unpack('<I4I4', vals2, c * 8 - 7)
  local q = sub(sketches, c * 32 - 31, c * 32)
  local np1 = unpack('<I2', counts1, c * 2 - 1)
  local np2 = unpack('<I2', counts2, c * 2 - 1)
  local mine = byte(flags, c) == 1
  local url = ARGV[25 + c]
  -- best so far: agreeing bytes, distance, key 1, and its key or where it is
  local ba, bd, bv, burl, bkept, bhd, bpos = -1, 99, nil, nil, nil, nil, 0
  local la = byte(lbest, c * 14 - 13) - 1
  if la >= 0 then
    ba, bd, bv = la, byte(lbest, c * 14 - 12), sub(lbest, c * 14 - 11, c * 14 - 4)
    bpos, bhd = unpack('<I4', lbest, c * 14 - 3), sub(lhead, c * w - w + 1, c * w)
  end
  -- the own buckets (first probes), where the page goes if new
  local j1, j2 = unpack('<I4', pi1, pp1 * 4 + 1), unpack('<I4', pi2, pp2 * 4 + 1)
  local own_hd1, own_hd2 = sub(bk1, j1 * w + 1, j1 * w + w), sub(bk2, j2 * w + 1, j2 * w + w)
  -- the own entry (position in own_hd1, kept?) and how its record verifies:
  -- agreeing bytes (-1: not a candidate), distance, key 1
  local opos, okept, oa, od, ov = nil, false, -1, 99, nil
  local ohd = sub(ohead, c * w - w + 1, c * w)
  if url ~= '' and ohd ~= own_hd1 then    -- set apart by the client: its old record
    local o = (c - 1) * 15
    opos, okept = unpack('<I4', lown, o + 11) - 1, byte(lown, o + 15) == 0
    if byte(lown, o + 1) > 0 then
      oa, od, ov = byte(lown, o + 1) - 1, byte(lown, o + 2), sub(lown, o + 3, o + 10)
    end
  elseif url ~= '' then
    local o = (c - 1) * 15
    local hint = unpack('<I4', lown, o + 11)
    local r_own = nil
    for _, r in ipairs(own1[own_hd1] or {}) do
      if r.url == url then r_own = r end
    end
    if r_own then                       -- stored by this very call: the latest
      opos, okept = r_own.pos, r_own.kept
    elseif check_all or changed1[own_hd1] then    -- may have changed since OWN_AT
      local f = own_in(redis.call('GET', uprefix .. own_hd1) or '', url)
      if f >= 0 then opos, okept = (f - f % 2) / 2, f % 2 == 0 end
    elseif hint > 0 then
      opos, okept = hint - 1, byte(lown, o + 15) == 0
    end
    if opos ~= nil and not from_start and opos == hint - 1 and byte(lown, o + 1) > 0 then
      oa, od, ov = byte(lown, o + 1) - 1, byte(lown, o + 2), sub(lown, o + 3, o + 10)
    end
  end
  local function consider(a, d, v, url_, hd, pos, kept)
    if opos ~= nil and hd == ohd and pos == opos then
      -- its own record: never its match; seen by key 1 and/or key 2
      oa, ov = a, v
      if d < od then od = d end
    elseif a >= needed and (a > ba or (a == ba and d < bd)) then
      ba, bd, bv, burl, bkept, bhd, bpos = a, d, v, url_, kept, hd, pos
    end
  end
  if check_all or mine or has_foreign then
    for p = pp1, pp1 + np1 - 1 do
      local j = unpack('<I4', pi1, p * 4 + 1)
      local hd = sub(bk1, j * w + 1, j * w + w)
      local ours = mine and own1[hd]
      if ours then
        for _, r in ipairs(ours) do
          local d = pop(bxor(r.lo1, lo1)) + pop(bxor(r.hi1, hi1))
          if d <= h then consider(agree(q, r.sk, 1), d, r.v1, r.url, hd, r.pos, r.kept) end
        end
      end
      if check_all or (mine and changed1[hd]) or foreign1[hd] then
        local data, start = unchecked(bprefix .. hd, bl1, j)
        for i = 1, #data - 39, 40 do
          local a, b = unpack('<I4I4', data, i)
          local d = pop(bxor(a, lo1)) + pop(bxor(b, hi1))
          if d <= h then
            consider(agree(q, data, i + 8), d, sub(data, i, i + 7), nil, hd,
                     (start + i - 1) / 40)
          end
        end
      end
    end
    for p = pp2, pp2 + np2 - 1 do
      local j = unpack('<I4', pi2, p * 4 + 1)
      local hd = sub(bk2, j * w + 1, j * w + w)
      local ours = mine and own2[hd]
      if ours then
        for _, r in ipairs(ours) do
          local d2 = pop(bxor(r.lo2, lo2)) + pop(bxor(r.hi2, hi2))
          if d2 <= h then
            local d = math.min(d2, pop(bxor(r.lo1, lo1)) + pop(bxor(r.hi1, hi1)))
            consider(agree(q, r.sk, 1), d, r.v1, r.url, r.hd, r.pos, r.kept)
          end
        end
      end
      if check_all or (mine and changed2[hd]) or foreign2[hd] then
        local data = unchecked(cprefix .. hd, bl2, j)
        for i = 1, #data - 13, 14 do
          local a, b = unpack('<I4I4', data, i)
          local d2 = pop(bxor(a, lo2)) + pop(bxor(b, hi2))
          if d2 <= h then
            local h0, h1, h2, p0, p1, p2 = byte(data, i + 8, i + 13)
            local pos = p0 + p1 * 256 + p2 * 65536
            local hd1 = string.format(hexfmt, h0 + h1 * 256 + h2 * 65536)
            -- key 1 and the sketch, from the key-1 record
            local r1 = redis.call('GETRANGE', bprefix .. hd1, pos * 40, pos * 40 + 39)
            if #r1 == 40 then
              local k1lo, k1hi = unpack('<I4I4', r1, 1)
              local d = math.min(d2, pop(bxor(k1lo, lo1)) + pop(bxor(k1hi, hi1)))
              consider(agree(q, r1, 9), d, sub(r1, 1, 8), nil, hd1, pos)
            end
          end
        end
      end
    end
  end
  pp1, pp2 = pp1 + np1, pp2 + np2
  local insert
  if opos ~= nil and okept and oa >= needed then
    -- a kept page met again, still itself: a revisit
    insert = false
    out[c] = {ov, od, url, oa, 0}
  else
    -- stored once: again only when its kept page changed past its record
    insert = opos == nil or okept
    if ba >= 0 then
      local found, fkept = burl, bkept
      if not found then found, fkept = key_at(bhd, bpos) end
      if found == url and opos == nil and not fkept then
        -- its own near-duplicate record, in the bucket key 1 moved from: the
        -- client decides the page again with that record set apart
        insert = false
        out[c] = {bv, bd, found, ba, 2, bhd, bpos}
      else
        -- a near-duplicate joins the index under its own key; not one whose
        -- match is stored under its own key (the key moved to another bucket)
        insert = insert and dups and found ~= url
        out[c] = {bv, bd, found, ba, insert and 1 or 0}
      end
    else
      out[c] = insert and 0 or -1
    end
  end
  if insert then
    local r = {v1 = sub(vals1, c * 8 - 7, c * 8), sk = q, url = url, kept = ba < 0,
               lo1 = lo1, hi1 = hi1, lo2 = lo2, hi2 = hi2, hd = own_hd1}
    local t1 = own1[own_hd1]
    if not t1 then
      t1 = {}
      own1[own_hd1] = t1
      touched1[#touched1 + 1] = own_hd1
      base1[own_hd1] = redis.call('STRLEN', bprefix .. own_hd1) / 40
    end
    local pos = base1[own_hd1] + #t1
    if pos >= MAX_RECORDS then
      return redis.error_reply('SIMDUP-FULL bucket ' .. own_hd1)
    end
    t1[#t1 + 1] = r
    r.pos = pos
    r.rec2 = sub(vals2, c * 8 - 7, c * 8) .. u24(tonumber(own_hd1, 16)) .. u24(pos)
    local t2 = own2[own_hd2]
    if not t2 then
      t2 = {}
      own2[own_hd2] = t2
      touched2[#touched2 + 1] = own_hd2
    end
    t2[#t2 + 1] = r
    inserted = inserted + 1
    newlog[inserted] = own_hd1 .. own_hd2 .. tok
  end
end

-- SET, not APPEND: APPEND leaves up to 100 % growth slack in every bucket
for _, hd in ipairs(touched1) do
  local recs, urls = {}, {}
  for i, r in ipairs(own1[hd]) do
    recs[i] = r.v1 .. r.sk
    urls[i] = struct.pack('<I2B', #r.url, r.kept and 0 or 1) .. r.url
  end
  local bk = bprefix .. hd
  redis.call('SET', bk, (redis.call('GET', bk) or '') .. table.concat(recs))
  redis.call('APPEND', uprefix .. hd, table.concat(urls))  -- keys: reported apart, speed first
end
for _, hd in ipairs(touched2) do
  local recs = {}
  for i, r in ipairs(own2[hd]) do recs[i] = r.rec2 end
  local ck = cprefix .. hd
  redis.call('SET', ck, (redis.call('GET', ck) or '') .. table.concat(recs))
end
if inserted > 0 then
  redis.call('INCRBY', nkey, inserted)
  local loglen = redis.call('APPEND', logkey, table.concat(newlog))
  if loglen > LOG_MAX then
    local keep = math.floor(LOG_KEEP / e) * e      -- whole entries
    redis.call('SET', logkey, redis.call('GETRANGE', logkey, loglen - keep, -1))
  end
end
return out
""".replace("LOG_MAX", str(LOG_MAX)).replace("LOG_KEEP", str(LOG_KEEP)).replace(
    "'FORMAT'", repr(FORMAT)).replace("MAX_RECORDS", str(MAX_BUCKET_RECORDS)).replace(
    "__OWN_IN__\n", _OWN_IN)


# The keys (URLs) of stored fingerprints, by bucket and position: for matches
# the client found in its snapshot, so that only the keys travel back, not the
# whole key lists of the buckets. ARGV: the ``B:u:`` prefix, the header digits
# ``w``, the buckets' headers (``w`` hex digits each), per bucket the number of
# positions asked (uint16 LE), and the positions (uint32 LE, ascending within a
# bucket). Reply: one key per position asked, in order ("" when the list is
# shorter: a bucket written before its keys, or a damaged list). An entry is
# a uint16 LE length, a flag byte and the key.
KEYS_AT = r"""
local uprefix, w = ARGV[1], tonumber(ARGV[2])
local heads, counts, positions = ARGV[3], ARGV[4], ARGV[5]
local out, n = {}, 0
local byte = string.byte
for b = 1, #counts / 2 do
  local s = redis.call('GET', uprefix .. string.sub(heads, (b - 1) * w + 1, b * w)) or ''
  local size = #s
  local pos, rec = 1, 0
  for _ = 1, struct.unpack('<I2', counts, b * 2 - 1) do
    local k = struct.unpack('<I4', positions, n * 4 + 1)
    while rec < k and pos + 2 <= size do    -- skip entries: length, flag, bytes
      local lo, hi = byte(s, pos, pos + 1)
      pos = pos + 3 + lo + hi * 256
      rec = rec + 1
    end
    local key = ''
    if rec == k and pos + 2 <= size then
      local lo, hi = byte(s, pos, pos + 1)
      local len = lo + hi * 256
      if pos + 2 + len <= size then key = string.sub(s, pos + 3, pos + 2 + len) end
    end
    n = n + 1
    out[n] = key
  end
end
return out
"""


# Each page's own entry, for the snapshot: ARGV: the ``B:u:`` prefix, the
# header digits ``w``, the pages' own key-1 bucket headers (``w`` hex digits
# each), then one key per page ("" for none). Reply per page: ``2 * position +
# 1`` if its own entry was stored as a near-duplicate, ``2 * position`` if
# kept, ``-1`` if the bucket does not list the key (the last entry counts).
OWN_AT = r"""
local uprefix, w, heads = ARGV[1], tonumber(ARGV[2]), ARGV[3]

__OWN_IN__
local lists, out = {}, {}
for c = 1, #heads / w do
  local url, found = ARGV[3 + c], -1
  if url ~= '' then
    local hd = string.sub(heads, (c - 1) * w + 1, c * w)
    local s = lists[hd]
    if s == nil then
      s = redis.call('GET', uprefix .. hd) or ''
      lists[hd] = s
    end
    found = own_in(s, url)
  end
  out[c] = found
end
return out
""".replace("__OWN_IN__\n", _OWN_IN)
