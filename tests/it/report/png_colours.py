"""Decodes a PNG (8-bit RGB or RGBA, not interlaced) with the standard library only and
prints its size, the number of distinct colours and the count of the commonest colour,
as JSON. tests/it/report.rs uses it to check that chromium's screenshot is not blank."""
import json
import struct
import sys
import zlib


def unfilter(kind, line, prev, bpp):
    if kind == 0:
        return line
    if kind == 2:
        return bytearray((x + y) & 255 for x, y in zip(line, prev))
    out = bytearray(line)
    for i in range(len(out)):
        a = out[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if kind == 1:
            out[i] = (out[i] + a) & 255
        elif kind == 3:
            out[i] = (out[i] + (a + b) // 2) & 255
        else:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            out[i] = (out[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return out


def main(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, bytearray(), None
    while pos < len(data):
        size, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + size]
        pos += 12 + size
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    bpp = 3 if colour_type == 2 else 4
    raw = zlib.decompress(bytes(idat))
    stride = width * bpp
    prev = bytearray(stride)
    counts = {}
    for y in range(height):
        start = y * (stride + 1)
        line = unfilter(raw[start], bytearray(raw[start + 1 : start + 1 + stride]), prev, bpp)
        for x in range(0, stride, bpp):
            key = bytes(line[x : x + 3])
            counts[key] = counts.get(key, 0) + 1
        prev = line
    print(json.dumps({"width": width, "height": height, "colours": len(counts),
                      "background": max(counts.values()), "pixels": width * height}))


main(sys.argv[1])
