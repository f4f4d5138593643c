#!/usr/bin/env python3
"""list_device_code.py --list-elf|--list-ptx LIB.so: the device code in a library's
.nv_fatbin section, one line per entry in cuobjdump's format ("ELF file 1: x.sm_75.cubin").
For machines whose CUDA toolkit lacks cuobjdump (the pip-packaged one); device_code.cmake
prefers cuobjdump when it is there. Fat binary layout: a 16-byte header (magic 0xBA55ED50,
version, header size, payload size) then entries, each a header (kind 1 = PTX, 2 = ELF;
its own size; payload size; the architecture at byte 28) and the payload."""
import struct
import sys

FATBIN_MAGIC = 0xBA55ED50


def section(data, name):
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise SystemExit("not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
    stroff = header(shstrndx)[4]
    for i in range(shnum):
        h = header(i)
        end = data.index(b"\0", stroff + h[0])
        if data[stroff + h[0]:end].decode() == name:
            return data[h[4]:h[4] + h[5]]
    return b""


def entries(fatbin):
    at = 0
    while at + 16 <= len(fatbin):
        magic, _version, hsize, size = struct.unpack_from("<IHHQ", fatbin, at)
        if magic != FATBIN_MAGIC:
            at += 8  # fat binaries are 8-byte aligned in the section
            continue
        e, end = at + hsize, at + hsize + size
        while e + 32 <= end:
            kind, _v, ehsize, psize = struct.unpack_from("<HHIQ", fatbin, e)
            arch, = struct.unpack_from("<I", fatbin, e + 28)
            yield kind, arch
            e += ehsize + psize
        at = end


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("--list-elf", "--list-ptx"):
        raise SystemExit(__doc__)
    want = 2 if sys.argv[1] == "--list-elf" else 1
    with open(sys.argv[2], "rb") as f:
        fatbin = section(f.read(), ".nv_fatbin")
    n = 0
    for kind, arch in entries(fatbin):
        if kind == want:
            n += 1
            print(f"{'ELF' if want == 2 else 'PTX'} file {n:4d}: entry.{n}.sm_{arch}.{'cubin' if want == 2 else 'ptx'}")


main()
