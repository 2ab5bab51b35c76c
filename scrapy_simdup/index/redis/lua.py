"""The server-side half of the Redis index: one Lua script, check-and-insert.

Layout under a base key ``B`` (the key prefix: in a crawl, ``SIMDUP_REDIS_KEY``
with the spider name):

``B:b:<header>``  one Redis string per bucket: the packed little-endian uint64
                  fingerprints whose top ``t`` bits are ``<header>`` (lower-case
                  hex, ``ceil(t / 4)`` digits), in insertion order. Append-only
                  (written with SET of old + new: an exact-size string, where
                  APPEND would leave up to 100 % growth slack).
``B:n``           number of fingerprints inserted (an integer string): the
                  index size and the insertion sequence number.
``B:log``         the most recent insertions, in order, one entry each: the
                  header (its ``d`` hex digits, as in the bucket name) and the
                  8-byte token of the ``check_and_add_many`` call that made
                  it; entries ``B:n - len/(d+8) + 1 .. B:n``. Trimmed to the
                  last ``LOG_KEEP`` bytes when it passes ``LOG_MAX``.
``B:id``          a token naming this incarnation of the index; a Redis that
                  lost its data (restart without persistence, FLUSHDB) has no
                  ``B:id`` or a new one, which tells writers their snapshot is
                  from another life.
``B:t``           the header size ``t``, fixed when the index is created.
``B:u:<header>``  the keys (URLs) of the bucket's pages, in the same order:
                  each a uint16 LE length and the UTF-8 bytes. Append-only.

Protocol (two round trips for a batch of pages, one for a batch of
duplicates):

1. *Snapshot*: ``MGET B:n B:id <all probed buckets>``: one atomic command.
2. *Local check* in the compiled core; a candidate with a match in the
   snapshot is a duplicate (the match was in the index at the snapshot's
   instant: the answer is linearisable there).
3. *Check-and-insert* (this script) for the others, with, per candidate, its
   value, its probed headers (own header first) and the byte length each
   probed bucket had in the snapshot.

Why the script's answer equals a sequential one (atomic across processes):
a Lua script runs atomically on the Redis server. Buckets are append-only, so
a bucket whose current length equals its snapshot length has exactly the
content the client checked, and a bucket that grew has the checked prefix plus
a tail: the script checks only tails. Every insertion increments ``B:n`` and
logs its header in the same script, so the headers inserted since the
snapshot are the last ``n_now - n_snap`` log entries: only those buckets (and
the ones this very script call appended to, which also resolves near-duplicate
pages *within* one batch) can have tails, and their tails are checked with
the same distance ``h`` as the client (full 64-bit Hamming distance).
Insertions logged by *other* writers (another token) are always re-checked.
The call's own insertions (its earlier chunk still in flight, earlier pages of
the same script call) are re-checked only for the candidates the client
flagged: the client knows their values and computes, in NumPy, which of them
land in a candidate's probed buckets within ``h``; for an unflagged candidate
none of them can match, so skipping them changes nothing. If the
log no longer reaches back to the snapshot, or the index was reset (``B:id``
changed or ``B:n`` went down), every probed bucket is checked, from its start
when it is shorter than in the snapshot. So at the instant the script runs
the candidate is compared with every fingerprint in its probed buckets, and is
inserted only if none is within ``h``: of two processes that meet two
near-duplicate pages at the same moment, the second script to run sees the
first one's insertion and reports a duplicate (exactly one kept), as long as
the two probe each other's buckets (the PSM recall condition, the same as for
two pages in one process).

Reply: one item per candidate, ``0`` when inserted, else ``{fingerprint (8
bytes), distance, key or ""}``.
"""

#: the start of the script's error reply when the index was re-created with
#: other settings than the writer's (header bits, fingerprint recipe)
SETTINGS_MISMATCH = "SIMDUP-SETTINGS"

LOG_MAX = 1 << 18       # bytes of log before trimming (21,845 insertions with t = 14)
LOG_KEEP = 1 << 17      # bytes kept after trimming (whole entries)

CHECK_AND_INSERT = r"""
local base = ARGV[1]
local h = tonumber(ARGV[2])
local n_snap = tonumber(ARGV[3])
local id_snap = ARGV[4]
local w = tonumber(ARGV[5])
local vals, counts, heads, seens = ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local id_new = ARGV[10]
local flags, tok = ARGV[11], ARGV[12]
local e = w + 8    -- log entry: header digits, writer token
local bxor, band, rshift = bit.bxor, bit.band, bit.rshift

local function pop(x)
  x = x - band(rshift(x, 1), 0x55555555)
  x = band(x, 0x33333333) + band(rshift(x, 2), 0x33333333)
  x = band(x + rshift(x, 4), 0x0F0F0F0F)
  x = x + rshift(x, 8)
  x = x + rshift(x, 16)
  return band(x, 0x3F)
end

local nkey, logkey, idkey = base .. ':n', base .. ':log', base .. ':id'
local uprefix = base .. ':u:'
local bprefix = base .. ':b:'
-- the writer's settings ride in its id (32 hex digits, 2 digits of header
-- bits, the fingerprint recipe): an index Redis lost and that is re-created
-- here records them again, and a writer whose settings differ from the
-- index's is refused instead of mixing incomparable fingerprints
local t_mine, fp_mine = tonumber(string.sub(id_new, 33, 34)), string.sub(id_new, 35)
local tkey, fkey = base .. ':t', base .. ':fingerprint'
local t_now = redis.call('GET', tkey)
if not t_now then
  redis.call('SET', tkey, tostring(t_mine))
elseif tonumber(t_now) ~= t_mine then
  return redis.error_reply('SIMDUP-SETTINGS header bits ' .. t_now)
end
if fp_mine ~= '' then
  local fp_now = redis.call('GET', fkey)
  if not fp_now then
    redis.call('SET', fkey, fp_mine)
  elseif fp_now ~= fp_mine then
    return redis.error_reply('SIMDUP-SETTINGS fingerprint ' .. fp_now)
  end
end
local id_now = redis.call('GET', idkey)
if not id_now then
  redis.call('SET', idkey, id_new)
  id_now = id_new
end
local n_now = tonumber(redis.call('GET', nkey) or '0')

-- which buckets may have changed since the snapshot
local check_all, from_start, changed, foreign, has_foreign = false, false, {}, {}, false
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
      local hd = string.sub(log, i, i + w - 1)
      changed[hd] = true
      if string.sub(log, i + w, i + e - 1) ~= tok then
        foreign[hd] = true
        has_foreign = true
      end
    end
  end
end

local out, newlog, pending = {}, {}, {}
-- insertions of this call, per bucket, written once at the end (exact size)
local addb, addu, touched = {}, {}, {}

-- the key of entry k (0-based) of a bucket's key list
local function key_at(hd, k)
  local s = redis.call('GET', uprefix .. hd)
  if not s then return '' end
  local pos = 1
  for _ = 1, k do
    if pos + 1 > #s then return '' end
    pos = pos + 2 + struct.unpack('<I2', s, pos)
  end
  if pos + 1 > #s then return '' end
  local len = struct.unpack('<I2', s, pos)
  return string.sub(s, pos + 2, pos + 1 + len)
end
local inserted = 0
local pp = 0
for c = 1, #vals / 8 do
  local lo, hi = struct.unpack('<I4I4', vals, c * 8 - 7)
  local np = struct.unpack('<I2', counts, c * 2 - 1)
  local found, fd, fhd, fk = nil, 0, nil, 0
  local ppc = pp
  local own = string.sub(heads, pp * w + 1, pp * w + w)
  local mine = string.byte(flags, c) == 1
  if check_all or mine or has_foreign then
    for p = 1, np do
      if found then break end
      local hd = string.sub(heads, pp * w + 1, pp * w + w)
      local ours = mine and addb[hd]
      if ours then
        for _, e in ipairs(ours) do
          local a, b = struct.unpack('<I4I4', e)
          local d = pop(bxor(a, lo)) + pop(bxor(b, hi))
          if d <= h then
            found, fd = e, d
            break
          end
        end
      end
      if not found and (check_all or (mine and changed[hd]) or foreign[hd]) then
        local key = bprefix .. hd
        local len = redis.call('STRLEN', key)
        local seen = struct.unpack('<I4', seens, pp * 4 + 1)
        local start = seen
        if from_start or len < seen then start = 0 end
        if len > start then
          local data = redis.call('GETRANGE', key, start, len - 1)
          for i = 1, #data - 7, 8 do
            local a, b = struct.unpack('<I4I4', data, i)
            local d = pop(bxor(a, lo)) + pop(bxor(b, hi))
            if d <= h then
              found, fd = string.sub(data, i, i + 7), d
              fhd, fk = hd, (start + i - 1) / 8
              break
            end
          end
        end
      end
      pp = pp + 1
    end
  end
  pp = ppc + np
  if found then
    out[c] = {found, fd, pending[found] or key_at(fhd, fk)}
  else
    local v = string.sub(vals, c * 8 - 7, c * 8)
    local t = addb[own]
    if not t then
      t = {}
      addb[own], addu[own] = t, {}
      touched[#touched + 1] = own
    end
    t[#t + 1] = v
    inserted = inserted + 1
    newlog[inserted] = own .. tok
    local url = ARGV[12 + c]
    local tu = addu[own]
    tu[#tu + 1] = struct.pack('<I2', #url) .. url
    pending[v] = url
    out[c] = 0
  end
end

for _, own in ipairs(touched) do
  -- SET, not APPEND: APPEND leaves up to 100 % growth slack in every bucket
  local bk, uk = bprefix .. own, uprefix .. own
  redis.call('SET', bk, (redis.call('GET', bk) or '') .. table.concat(addb[own]))
  redis.call('APPEND', uk, table.concat(addu[own]))    -- keys: reported apart, speed first
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
""".replace("LOG_MAX", str(LOG_MAX)).replace("LOG_KEEP", str(LOG_KEEP))


# The keys (URLs) of stored fingerprints, by bucket and position: for matches
# the client found in its snapshot, so that only the keys travel back, not the
# whole key lists of the buckets. ARGV: the ``B:u:`` prefix, the header digits
# ``w``, the buckets' headers (``w`` hex digits each), per bucket the number of
# positions asked (uint16 LE), and the positions (uint32 LE, ascending within a
# bucket). Reply: one key per position asked, in order ("" when the list is
# shorter: a bucket written before its keys, or a damaged list).
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
    while rec < k and pos + 1 <= size do    -- skip records: uint16 LE length + bytes
      local lo, hi = byte(s, pos, pos + 1)
      pos = pos + 2 + lo + hi * 256
      rec = rec + 1
    end
    local key = ''
    if rec == k and pos + 1 <= size then
      local lo, hi = byte(s, pos, pos + 1)
      local len = lo + hi * 256
      if pos + 1 + len <= size then key = string.sub(s, pos + 2, pos + 1 + len) end
    end
    n = n + 1
    out[n] = key
  end
end
return out
"""
