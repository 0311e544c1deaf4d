"""Pictures as the tests read and provoke them: an independent PNG decoder, and attention submissions
whose mistakes draw a picture.

``decode_png`` reads lumen-ex's PNGs back without its writer (the spec's chunk layout, CRCs, zlib, all
five scanline filters); ``submission`` writes exercise 1's file around an attention body (``HEADER``,
``CORRECT_ATTENTION``), and ``MASK_INVERTED`` is one that masks the wrong cells.
"""

from __future__ import annotations

import struct
import zlib

CORRECT_ATTENTION = '''
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
'''
HEADER = "import math\n\nimport torch\n\n\ndef scaled_dot_product_attention(q, k, v, mask=None):"


def submission(body: str, output: str = "weights @ v", causal: str = "k_pos <= q_pos") -> str:
    return f'''{HEADER}{body}    return {output}, weights


def causal_mask(L_q, L_k=None, device=None):
    L_k = L_q if L_k is None else L_k
    q_pos = torch.arange(L_q, device=device)[:, None] + (L_k - L_q)
    k_pos = torch.arange(L_k, device=device)[None, :]
    return {causal}
'''


MASK_INVERTED = submission(CORRECT_ATTENTION.replace("masked_fill(~mask", "masked_fill(mask"))


def decode_png(data: bytes) -> dict:
    """{"width", "height", "depth", "colour_type", "palette", "text", "pixels": rows of RGB tuples}."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, f"bad CRC in {kind!r}"
        assert len(body) == length, f"truncated {kind!r}"
        chunks.append((kind, body))
        pos += 12 + length
    assert pos == len(data), "bytes after the last chunk"
    kinds = [k for k, _ in chunks]
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and b"IDAT" in kinds
    assert kinds.index(b"PLTE") < kinds.index(b"IDAT")
    width, height, depth, colour, compression, filtering, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (compression, filtering, interlace) == (0, 0, 0)
    assert depth == 8 and colour == 3, "this decoder reads 8-bit palette images"
    plte = next(b for k, b in chunks if k == b"PLTE")
    assert len(plte) % 3 == 0
    palette = [tuple(plte[i:i + 3]) for i in range(0, len(plte), 3)]
    text = {}
    for k, b in chunks:
        if k == b"tEXt":
            key, _, value = b.partition(b"\x00")
            text[key.decode("latin-1")] = value.decode("latin-1")
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    stride = width                                    # one byte per pixel
    assert len(raw) == height * (stride + 1)
    rows, prev, filters = [], bytearray(stride), set()
    for y in range(height):
        line = raw[y * (stride + 1):(y + 1) * (stride + 1)]
        ftype, cur = line[0], bytearray(line[1:])
        filters.add(ftype)
        for x in range(stride):
            a = cur[x - 1] if x else 0
            b, c = prev[x], prev[x - 1] if x else 0
            if ftype == 1:
                cur[x] = (cur[x] + a) & 0xFF
            elif ftype == 2:
                cur[x] = (cur[x] + b) & 0xFF
            elif ftype == 3:
                cur[x] = (cur[x] + (a + b) // 2) & 0xFF
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[x] = (cur[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
            else:
                assert ftype == 0, f"unknown filter type {ftype}"
        rows.append(bytes(cur))
        prev = cur
    assert all(i < len(palette) for r in rows for i in r), "a pixel indexes past the palette"
    return {"width": width, "height": height, "depth": depth, "colour_type": colour, "palette": palette,
            "text": text, "filters": filters, "indices": rows, "pixels": [[palette[i] for i in r] for r in rows]}
