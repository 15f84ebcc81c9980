"""Inspects one libclshim.dylib with LLVM's llvm-objdump and llvm-nm and fails (exit 1,
one line per difference on stderr) unless:

- the file is a 64-bit Mach-O dylib for the expected CPU;
- its exports are exactly the four loader-layer entry points and the copies' claim
  (on macOS the preload functions stay unexported: dyld reaches them through __interpose);
- __DATA,__interpose holds exactly one tuple per interposed framework function, each
  pairing clshim's `macos::interposers::<name>` with a weak import of the framework's
  `_<name>`;
- every import from OpenCL.framework is weak, and the framework is loaded with
  LC_LOAD_WEAK_DYLIB, so the library loads where the framework is missing;
- the libraries it loads are only ones every Mac has, and its install name is
  @rpath/libclshim.dylib rather than a path of the build machine.

On success it prints one line: what was checked, with the counts.
Usage: check_macho.py ARM64|X86_64 FILE
"""
import re
import subprocess
import sys

LAYER_EXPORTS = {"_clGetLayerInfo", "_clInitLayer", "_clInitLayerWithProperties", "_clDeinitLayer"}
# The claim through which copies of the library loaded in one process agree which records.
CLAIM_EXPORT = "_clshim_claim_recorder_v1"
EXPORTS = LAYER_EXPORTS | {CLAIM_EXPORT}
INTERPOSED = {
    "clBuildProgram", "clCompileProgram", "clLinkProgram", "clGetProgramInfo",
    "clGetProgramBuildInfo",
    "clCreateProgramWithBinary", "clCreateProgramWithSource", "clReleaseProgram",
}
FRAMEWORK = "/System/Library/Frameworks/OpenCL.framework/Versions/A/OpenCL"
# Present on every macOS release the Rust targets support (11+ on arm64, 10.12+ on x86_64).
ALLOWED_LOADS = {"/usr/lib/libSystem.B.dylib", "/usr/lib/libiconv.2.dylib"}
INSTALL_NAME = "@rpath/libclshim.dylib"


def tool(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def main():
    cpu, path = sys.argv[1], sys.argv[2]
    errors = []

    header = tool("llvm-objdump", "--macho", "--private-header", path).split("\n")
    fields = header[-2].split() if len(header) >= 2 else []
    if fields[:2] != ["MH_MAGIC_64", cpu] or "DYLIB" not in fields:
        errors.append(f"header is {' '.join(fields[:5])!r}, want a 64-bit {cpu} DYLIB")

    # Load commands: (cmd, name) for the ones that name a library.
    loads, install = [], None
    cmd = None
    for line in tool("llvm-objdump", "--macho", "--private-headers", path).splitlines():
        m = re.match(r"\s*cmd (\S+)", line)
        if m:
            cmd = m.group(1)
            continue
        m = re.match(r"\s*name (\S+) \(offset", line)
        if m and cmd:
            if cmd == "LC_ID_DYLIB":
                install = m.group(1)
            elif cmd != "LC_LOAD_DYLINKER":
                loads.append((cmd, m.group(1)))
    if install != INSTALL_NAME:
        errors.append(f"install name is {install!r}, want {INSTALL_NAME!r}")
    for cmd, name in loads:
        if name == FRAMEWORK:
            if cmd != "LC_LOAD_WEAK_DYLIB":
                errors.append(f"OpenCL.framework is loaded with {cmd}, want LC_LOAD_WEAK_DYLIB")
        elif name not in ALLOWED_LOADS or cmd != "LC_LOAD_DYLIB":
            errors.append(f"loads {name} ({cmd}): not a library every Mac has")
    if not any(n == FRAMEWORK for _, n in loads):
        errors.append("OpenCL.framework is not loaded: the interpose tuples cannot bind")

    exports = set()
    for line in tool("llvm-objdump", "--macho", "--exports-trie", path).splitlines():
        m = re.match(r"0x[0-9A-Fa-f]+\s+(\S+)", line)
        if m:
            exports.add(m.group(1))
    if exports != EXPORTS:
        extra, missing = sorted(exports - EXPORTS), sorted(EXPORTS - exports)
        errors.append(f"exports differ: unexpected {extra[:8]}{'...' if len(extra) > 8 else ''}, missing {missing}")

    # Binds: address -> (dylib, symbol, weak).
    binds = {}
    for kind in ("--bind", "--lazy-bind", "--weak-bind"):
        for line in tool("llvm-objdump", "--macho", kind, path).splitlines():
            m = re.match(r"\s*(\S+)\s+(\S+)\s+0x([0-9A-Fa-f]+)\s+.*?\s(\S+)\s+(_\S+)( \(weak_import\))?\s*$", line)
            if m:
                binds[int(m.group(3), 16)] = (m.group(4), m.group(5), bool(m.group(6)), kind)
    for addr, (dylib, sym, weak, kind) in sorted(binds.items()):
        if dylib == "OpenCL" and not weak:
            errors.append(f"{sym} is imported from OpenCL.framework without weak_import ({kind} at {addr:#x})")

    # Local function symbols by address, demangled.
    funcs = {}
    for line in tool("llvm-nm", "-C", "--defined-only", path).splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3:
            funcs.setdefault(int(parts[0], 16), parts[2])

    # llvm-objdump prints the section as 32-bit words on arm64 and as bytes on x86_64;
    # both are turned back into the section's bytes, then into (slot, replacement) pairs.
    data, start = bytearray(), None
    for line in tool("llvm-objdump", "--macho", "--section=__DATA,__interpose", path).splitlines():
        m = re.match(r"([0-9a-fA-F]{16})\t([0-9a-fA-F ]+)$", line)
        if m:
            start = int(m.group(1), 16) if start is None else start
            for tok in m.group(2).split():
                data += bytes.fromhex(tok) if len(tok) == 2 else int(tok, 16).to_bytes(4, "little")
    tuples = [
        (start + off, int.from_bytes(data[off:off + 8], "little"))
        for off in range(0, len(data) - len(data) % 16, 16)
    ]
    seen = set()
    for slot, replacement in tuples:
        target = funcs.get(replacement, f"{replacement:#x} (no symbol)")
        dylib, sym, weak, _ = binds.get(slot + 8, (None, None, None, None))
        m = re.match(r"clshim::macos::interposers::(\w+)::h[0-9a-f]+$", target)
        if not m:
            errors.append(f"interpose tuple at {slot:#x}: replacement is {target}, not a clshim::macos::interposers function")
            continue
        name = m.group(1)
        if (dylib, sym, weak) != ("OpenCL", "_" + name, True):
            errors.append(f"interpose tuple at {slot:#x}: {name} replaces {sym} from {dylib} (weak={weak}), want a weak _{name} from OpenCL")
        seen.add(name)
    if len(tuples) != len(INTERPOSED) or seen != INTERPOSED:
        errors.append(f"{len(tuples)} interpose tuples for {sorted(seen)}, want one each for {sorted(INTERPOSED)}")

    name = path.split("/")[-1]
    if errors:
        for e in errors:
            print(f"{name} ({cpu}): {e}", file=sys.stderr)
        sys.exit(1)
    libs = ", ".join(sorted(n.split("/")[-1] + (" (weak)" if c == "LC_LOAD_WEAK_DYLIB" else "") for c, n in loads))
    print(f"{cpu}: {len(exports)} exports (layer entry points and the claim), {len(tuples)} interpose tuples -> weak OpenCL imports, loads {libs}")


if __name__ == "__main__":
    main()
