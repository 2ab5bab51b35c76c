"""Page fingerprints: HTML or text to a 64-bit weighted simhash and its
weights ``W`` (decoding, main-text extraction, tokens, features, IDF table).
"""
