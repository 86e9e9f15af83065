#!/usr/bin/env python3
"""Which kernels two builds of a plugin share byte for byte, without cuobjdump.

    scripts/kernel_bytes.py OLD.so NEW.so

Reads each .so's .nv_fatbin, takes every uncompressed cubin (one a target arch) and compares each
kernel's .text section: identical code (same SASS, same constant-bank offsets) runs the same, so
its earlier GPU runs still hold. Prints one line a kernel of NEW: same, renamed (the same code
under another name in OLD, e.g. after a template parameter was added), differs (with both
instruction counts) or new. Names drop the anonymous-namespace hash, which changes between builds."""
import hashlib
import re
import struct
import subprocess
import sys

FATBIN_MAGIC = 0xBA55ED50
KIND_CUBIN = 2


def section(path, name):
    for line in subprocess.check_output(["readelf", "-W", "-S", path], text=True).splitlines():
        if f" {name} " in line:
            fields = line.split("]", 1)[1].split()  # name type address offset size ...
            offset, size = int(fields[3], 16), int(fields[4], 16)
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read(size)
    sys.exit(f"{path}: no {name} section")


def cubins(fatbin):
    """(arch, ELF bytes) of each cubin; a fatbin is a run of [header][entry header][payload]..."""
    pos = 0
    while pos + 16 <= len(fatbin):
        magic, _, header_size, body_size = struct.unpack_from("<IHHQ", fatbin, pos)
        if magic != FATBIN_MAGIC:
            pos += 8
            continue
        p, end = pos + header_size, pos + header_size + body_size
        while p < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHII", fatbin, p)
            arch = struct.unpack_from("<I", fatbin, p + 28)[0]
            data = fatbin[p + entry_header:p + entry_header + payload]
            if kind == KIND_CUBIN:
                if data[:4] != b"\x7fELF":
                    sys.exit("compressed cubin: build without fatbin compression to compare")
                yield arch, data
            p += entry_header + payload
        pos = end


def text_sections(elf):
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    entsize, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * entsize) for i in range(count)]
    names = headers[names_index][4]
    for h in headers:
        name = elf[names + h[0]:elf.index(b"\0", names + h[0])].decode()
        if name.startswith(".text."):
            yield name[6:], elf[h[4]:h[4] + h[5]]


def kernels(path):
    out = {}
    for arch, elf in cubins(section(path, ".nv_fatbin")):
        for name, code in text_sections(elf):
            name = re.sub(r"_GLOBAL__N__[0-9a-f]+_\d+_(\w+?)_cu_[0-9a-f]+", r"\1", name)
            out[(arch, name)] = (hashlib.sha1(code).hexdigest(), len(code) // 16)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    old, new = kernels(sys.argv[1]), kernels(sys.argv[2])
    old_code = {(arch, sha) for (arch, _), (sha, _) in old.items()}
    tally = {}
    for key in sorted(new):
        arch, name = key
        if key not in old:
            verdict = "renamed" if (arch, new[key][0]) in old_code else "new"
        elif old[key][0] == new[key][0]:
            verdict = "same"
        else:
            verdict = f"differs ({old[key][1]} -> {new[key][1]} instructions)"
        tally[verdict.split()[0]] = tally.get(verdict.split()[0], 0) + 1
        print(f"sm_{arch:<4} {verdict:<34} {name}")
    print(", ".join(f"{n} {v}" for v, n in sorted(tally.items())))


if __name__ == "__main__":
    main()
