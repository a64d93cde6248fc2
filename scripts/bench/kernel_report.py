"""Offline compilation report of Fastmax's Triton kernels for the H100 (sm_90), on a machine without a GPU.

    python -m scripts.bench.kernel_report [--workers=2] [--out=results/kernel_report/sm90] [--no_fail] [--D=16,64]
        [--dtype=bfloat16,float32]

Why (issue 56, C3): the kernels of ``attention/fastmax/kernels/`` are written and tested on CPUs
(the Triton interpreter), which says nothing about how they compile for a GPU. Triton compiles for
any target without one, so this script judges each kernel as the H100 would get it: registers,
spills, shared memory and whether its products run on the tensor cores.

What it does:
1. For every configuration of the GPU benchmark (D = Dv in {16, 64}; p = 1 with the "chunk"
   kernels, p = 2 with "chunk" and "parallel"; causal and not; bfloat16 and float32; forward and
   backward, at the Triton chunk size), calls the kernels package's ``forward`` and ``backward`` on
   small CPU tensors (N = 1, T = 2 chunks) inside ``common.record_only()`` and keeps the distinct
   launches (kernel, argument types, constexprs, num_warps, num_stages).
2. Compiles each distinct launch with ``triton.compile`` for ``GPUTarget("cuda", 90, 32)`` in
   worker processes started fresh (spawn) with TRITON_INTERPRET removed (under the interpreter
   ``triton.jit`` gives functions that compile nothing), whatever the calling environment, and
   with a fresh Triton cache so that the compile times are real. The launches are recorded in such
   a worker too, so that the constexpr ``DOT`` (``common.dot_mode``) is a GPU's, never the
   interpreter's "emulate"; float32 under the GPU benchmark's float32 matmul precision
   (``FLOAT32_MATMUL_PRECISION`` "high": TF32 tensor cores; the exact "ieee" mode of the
   exactness tests is not a benchmark configuration).
3. Reads per kernel: registers, stack and local bytes (``cuobjdump --dump-resource-usage`` of the
   cubin, the one shipped with Triton), shared memory (``metadata.shared``: what a launch asks
   for; cuobjdump's static shared is added to it for the limits, which are on the sum), whether
   the PTX has an ``mma`` / ``wgmma`` instruction (tensor cores), whether the kernel has a product
   at all (``tt.dot`` in its TTIR), and the compile time.
4. Checks the limits (``check_limits``): no stack (spills), at most 255 registers per thread,
   shared memory within the H100's 232,448 B per block, and within sm_86 / sm_89's 101,376 B when
   D, Dv <= 64 (so that the same kernels run on those GPUs), and tensor cores in every bfloat16
   kernel that multiplies tiles (a kernel without a ``tt.dot`` has nothing to put on them).

Outputs: one markdown table on stdout (a row per distinct launch; where several configurations
share a launch, their differing fields are listed together); with ``--out results/<folder>/<name>``
``<name>.json`` (the rows plus the Triton version, the target and the date) and its entry in the
folder's ``manifest.json`` (``provenance.record``: the command, the commit, the machine), which
docs/gpu.md renders (``scripts.analysis.published.benchmark``'s renderer ``kernel_report``). Exit
status 1 when a limit is missed (``--no_fail``: 0), 2 when the kernels package does not expose
``forward`` / ``backward`` yet.
"""
import argparse
import concurrent.futures
import contextlib
import datetime
import importlib
import importlib.util
import json
import multiprocessing
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

TARGET = ("cuda", 90, 32)  # backend, compute capability, warp size: the H100
D_VALUES = (16, 64)
DTYPES = ("bfloat16", "float32")
KERNELS_OF_DEGREE = {1: ("chunk",), 2: ("chunk", "parallel")}
PASSES = ("forward", "backward")

MAX_STACK_BYTES = 0
MAX_REGISTERS = 255
MAX_SHARED_SM90 = 232_448  # opt-in shared memory per block of the H100
MAX_SHARED_SM86 = 101_376  # the same on sm_86 / sm_89 (RTX 30xx / 40xx, A10, L4)
SMALL_HEAD_DIM = 64  # at D, Dv <= this the kernels must also fit sm_86 / sm_89

KERNELS_MODULE = "attention.fastmax.kernels"  # the package whose forward / backward launch the kernels
FLOAT32_MATMUL_PRECISION = "high"  # torch.set_float32_matmul_precision of the GPU benchmark (scripts/bench/gpu.py)
GPU_DOT = "tf32"  # common.dot_mode() on a GPU under that precision
SHOWN_AS_COLUMNS = {"D", "DV", "CAUSAL", "DOT"}  # constexprs not repeated in the constexprs column

CONFIG_FIELDS = ("D", "Dv", "dtype", "p", "kernel", "causal", "pass")


# ---------------------------------------------------------------------------------------------
# 1. configurations and their launches


def configurations(D_values=D_VALUES, dtypes=DTYPES):
    """The GPU benchmark's configurations: dicts with D, Dv (= D), p, kernel ("chunk" |
    "parallel"), causal, dtype (name) and chunk (the Triton default for p)."""
    from attention.fastmax import chunk_size_for

    return [dict(D=D, Dv=D, p=p, kernel=kernel, causal=causal, dtype=dtype, chunk=chunk_size_for(p, None))
            for D in D_values for p, kernels in KERNELS_OF_DEGREE.items() for kernel in kernels
            for causal in (True, False) for dtype in dtypes]


def coefficients(p):
    """(c0, c1, c2) of a configuration: any nonzero values compile the same; c2 = 0 for p = 1."""
    return (1.0, 1.0, 0.5 if p == 2 else 0.0)


def small_inputs(config):
    """CPU tensors for one configuration: q, k (1, T, D), v and g (1, T, Dv) in its dtype, rho and
    delta (1, T) float32, has_key (1, T) bool, with T = 2 chunks."""
    import torch

    T, dtype = 2 * config["chunk"], getattr(torch, config["dtype"])
    q, k = torch.randn(1, T, config["D"]).to(dtype), torch.randn(1, T, config["D"]).to(dtype)
    v, g = torch.randn(1, T, config["Dv"]).to(dtype), torch.randn(1, T, config["Dv"]).to(dtype)
    return dict(q=q, k=k, v=v, g=g, rho=torch.ones(1, T), delta=torch.zeros(1, T),
                has_key=torch.ones(1, T, dtype=torch.bool))


def record_launches(api, config):
    """The launches of ``api.forward`` and ``api.backward`` (the kernels package, or a stand-in
    with the same functions) for one configuration, recorded and not run: [(pass, Launch)]."""
    import torch

    from attention.fastmax.kernels import common

    x, causal, coeffs, chunk = small_inputs(config), config["causal"], coefficients(config["p"]), config["chunk"]
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(FLOAT32_MATMUL_PRECISION)
    try:
        return _record(api, x, causal, coeffs, chunk, config["kernel"], common)
    finally:
        torch.set_float32_matmul_precision(previous)


def _record(api, x, causal, coeffs, chunk, kernel, common):
    with common.record_only() as launches:
        api.forward(x["q"], x["k"], x["v"], None, None, None, x["rho"], x["has_key"], causal, coeffs, chunk,
                    kernel=kernel)
        forward = list(launches)
    with common.record_only() as launches:
        api.backward(x["g"], x["delta"], x["q"], x["k"], x["v"], None, None, None, x["rho"], causal, coeffs, chunk,
                     kernel=kernel)
        backward = list(launches)
    return [("forward", launch) for launch in forward] + [("backward", launch) for launch in backward]


def compile_job(launch):
    """What ``compile_one`` needs of a ``Launch``, as plain data (a worker re-imports the kernel):
    kernel name, its module, file and qualified name, the signature, the constexprs, num_warps
    and num_stages (None: Triton's default). A launch recorded under the interpreter (``DOT``
    "emulate") is compiled as the benchmark's GPU process would launch it (``GPU_DOT``)."""
    fn = getattr(launch.kernel, "fn", launch.kernel)
    constexprs = {name: value for name, value in launch.meta.items() if name not in ("num_warps", "num_stages")}
    if constexprs.get("DOT") == "emulate":
        constexprs["DOT"] = GPU_DOT
    code = getattr(fn, "__code__", None)
    return dict(name=launch.name, module=fn.__module__, file=code and code.co_filename, qualname=fn.__qualname__,
                signature=dict(launch.signature), constexprs=constexprs,
                num_warps=launch.meta.get("num_warps"), num_stages=launch.meta.get("num_stages"))


def job_key(job):
    """Identity of a compilation: two launches with the same key compile to the same binary."""
    return (job["module"], job["qualname"], tuple(sorted(job["signature"].items())),
            tuple(sorted((k, repr(v)) for k, v in job["constexprs"].items())), job["num_warps"], job["num_stages"])


def collect_jobs(configs, api=None):
    """For each configuration and pass, its compile jobs: [(config with "pass", job)]. ``api``:
    the kernels package by default (``KERNELS_MODULE``)."""
    if api is None:
        api = kernels_api()
    return [(dict(config, **{"pass": name}), compile_job(launch))
            for config in configs for name, launch in record_launches(api, config)]


def kernels_api(name=KERNELS_MODULE):
    """The module ``name`` when it exposes ``forward`` and ``backward``, else None."""
    module = importlib.import_module(name)
    exposed = all(callable(getattr(module, name, None)) for name in ("forward", "backward"))
    return module if exposed else None


def collect_jobs_or_none(configs, api_module=KERNELS_MODULE):
    """``collect_jobs`` with the kernels package ``api_module``, or None when it has no forward /
    backward yet."""
    api = kernels_api(api_module)
    return None if api is None else collect_jobs(configs, api)


def distinct_jobs(pairs):
    """{job_key: (job, [configs])}: each distinct launch once, with every configuration that made it."""
    distinct = {}
    for config, job in pairs:
        distinct.setdefault(job_key(job), (job, []))[1].append(config)
    return distinct


# ---------------------------------------------------------------------------------------------
# 2. offline compilation for sm_90, in clean worker processes


def kernel_function(job):
    """The ``triton.jit`` function of a job, imported in this process: from its module, else (a
    module that is not importable by name here, such as a test module) from its file."""
    try:
        module = importlib.import_module(job["module"])
    except ImportError:
        if not job.get("file"):
            raise
        spec = importlib.util.spec_from_file_location(f"_kernel_report_{abs(hash(job['file']))}", job["file"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    for part in job["qualname"].split("."):
        module = getattr(module, part)
    return module


def cuobjdump_path():
    """The cuobjdump that Triton ships (triton/backends/nvidia/bin/)."""
    import triton.backends.nvidia

    return os.path.join(os.path.dirname(triton.backends.nvidia.__file__), "bin", "cuobjdump")


def parse_resource_usage(text):
    """``cuobjdump --dump-resource-usage`` output -> {function name: {"REG": int, "STACK": int,
    "SHARED": int, "LOCAL": int, ...}} (the fields of each "Function" line that follows it)."""
    usage, current = {}, None
    for line in text.splitlines():
        header = re.match(r"\s*Function\s+([^\s:]+)\s*:", line)
        if header:
            current = usage.setdefault(header.group(1), {})
        elif current is not None:
            current.update({k: int(v) for k, v in re.findall(r"([A-Z_]+(?:\[\d+\])?):(\d+)", line)})
    return usage


def resource_usage(cubin, name):
    """Registers and friends of the function ``name`` in ``cubin`` (bytes), through cuobjdump."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, f"{name}.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        out = subprocess.run([cuobjdump_path(), "--dump-resource-usage", path], capture_output=True, text=True,
                             check=True).stdout
    usage = parse_resource_usage(out)
    if name in usage:
        return usage[name]
    if len(usage) == 1:
        return next(iter(usage.values()))
    raise ValueError(f"cuobjdump: no function {name} among {sorted(usage)}")


def uses_tensor_cores(ptx):
    """Whether the PTX has a tensor-core product: ``mma.sync`` (sm_80 style) or ``wgmma.mma_async`` (sm_90)."""
    return re.search(r"\b(?:wgmma\.mma_async|mma\.sync)", ptx) is not None


def has_product(ttir):
    """Whether the kernel multiplies tiles at all (a ``tt.dot`` in its Triton IR)."""
    return re.search(r"\btt\.dot\b", ttir) is not None


def compile_one(job):
    """Compile one job for sm_90 (``TARGET``) and measure it. Runs in a worker without
    TRITON_INTERPRET; returns {registers, stack_bytes, local_bytes, shared_bytes,
    static_shared_bytes, tensor_cores, has_dot, compile_s, error}; on a failed compilation every
    figure is None and ``error`` says why."""
    import triton
    from triton.backends.compiler import GPUTarget

    result = dict(registers=None, stack_bytes=None, local_bytes=None, shared_bytes=None, static_shared_bytes=None,
                  tensor_cores=None, has_dot=None, compile_s=None, error=None)
    try:
        fn = kernel_function(job)
        source = triton.compiler.ASTSource(fn=fn, signature=job["signature"], constexprs=job["constexprs"])
        options = {k: job[k] for k in ("num_warps", "num_stages") if job[k] is not None}
        start = time.perf_counter()
        compiled = triton.compile(source, target=GPUTarget(*TARGET), options=options)
        result["compile_s"] = time.perf_counter() - start
        usage = resource_usage(compiled.asm["cubin"], compiled.metadata.name)
        result.update(registers=usage.get("REG"), stack_bytes=usage.get("STACK"), local_bytes=usage.get("LOCAL"),
                      static_shared_bytes=usage.get("SHARED", 0), shared_bytes=int(compiled.metadata.shared),
                      tensor_cores=uses_tensor_cores(compiled.asm["ptx"]), has_dot=has_product(compiled.asm["ttir"]))
    except Exception as e:  # one kernel's failure is a row of the report, not the end of it
        result["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
    return result


def _clean_worker():
    os.environ.pop("TRITON_INTERPRET", None)


@contextlib.contextmanager
def clean_pool(workers, cache_dir=None):
    """A ProcessPoolExecutor of ``workers`` spawned processes without TRITON_INTERPRET (removed from
    this process's environment while the pool starts its workers, and in each worker before it
    runs anything), with TRITON_CACHE_DIR = ``cache_dir`` when given."""
    saved = {name: os.environ.get(name) for name in ("TRITON_INTERPRET", "TRITON_CACHE_DIR")}
    os.environ.pop("TRITON_INTERPRET", None)
    if cache_dir is not None:
        os.environ["TRITON_CACHE_DIR"] = cache_dir
    try:
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers, initializer=_clean_worker,
                                                    mp_context=multiprocessing.get_context("spawn")) as pool:
            yield pool
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def compile_all(jobs, workers=2, fresh_cache=True):
    """``compile_one`` of every job in ``workers`` clean processes (``clean_pool``), each with an
    empty Triton cache unless ``fresh_cache`` is False; results in the order of ``jobs``."""
    with contextlib.ExitStack() as stack:
        cache = stack.enter_context(tempfile.TemporaryDirectory(prefix="kernel_report_")) if fresh_cache else None
        pool = stack.enter_context(clean_pool(workers, cache))
        return list(pool.map(compile_one, jobs))


# ---------------------------------------------------------------------------------------------
# 3. rows, limits, table


def joined(values):
    """Distinct values in first-seen order, joined by "/" (one value: itself)."""
    distinct = list(dict.fromkeys(values))
    return distinct[0] if len(distinct) == 1 else "/".join(str(v) for v in distinct)


def make_row(job, configs, result):
    """One report row: the configuration fields (joined over the configurations sharing the launch),
    the kernel, its constexprs and launch options, the compile result, and ``failures``."""
    row = {field: joined([c[field] for c in configs]) for field in CONFIG_FIELDS}
    row.update(name=job["name"], constexprs={k: v for k, v in job["constexprs"].items() if k not in SHOWN_AS_COLUMNS},
               num_warps=job["num_warps"], num_stages=job["num_stages"], **result)
    row["failures"] = check_limits(row)
    return row


def check_limits(row):
    """The limits a row misses, as short strings (empty: the kernel passes). ``row`` needs D, Dv,
    dtype, registers, stack_bytes, shared_bytes (static_shared_bytes added when present),
    tensor_cores, has_dot (None: treated as having a product) and error."""
    if row.get("error"):
        return [f"compile failed ({row['error']})"]
    failures = []
    if row["stack_bytes"] > MAX_STACK_BYTES:
        failures.append(f"stack {row['stack_bytes']} B (spills)")
    if row["registers"] > MAX_REGISTERS:
        failures.append(f"{row['registers']} registers > {MAX_REGISTERS}")
    shared = row["shared_bytes"] + (row.get("static_shared_bytes") or 0)
    if shared > MAX_SHARED_SM90:
        failures.append(f"shared {shared:,} B > {MAX_SHARED_SM90:,} B (sm_90)")
    elif shared > MAX_SHARED_SM86 and largest_head_dim(row) <= SMALL_HEAD_DIM:
        failures.append(f"shared {shared:,} B > {MAX_SHARED_SM86:,} B (sm_86/89) at D <= {SMALL_HEAD_DIM}")
    if "bfloat16" in str(row["dtype"]) and row.get("has_dot", True) is not False and not row["tensor_cores"]:
        failures.append("bf16 products without mma/wgmma")
    return failures


def largest_head_dim(row):
    """The largest of a row's D and Dv (either may list several values, "16/64")."""
    return max(int(d) for d in f"{row['D']}/{row['Dv']}".split("/"))


def _cell(value, fmt="{}"):
    return "-" if value is None else fmt.format(value)


def markdown_table(rows):
    """The rows as one markdown table."""
    header = ["kernel", "D", "Dv", "dtype", "p", "mode", "causal", "pass", "constexprs", "num_warps", "registers",
              "stack B", "shared B", "tensor cores", "compile s", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cores = "-" if row["tensor_cores"] is None else ("yes" if row["tensor_cores"] else "no")
        if row["has_dot"] is False:
            cores += " (no dot)"
        constexprs = " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in row["constexprs"].items())
        cells = [row["name"], row["D"], row["Dv"], row["dtype"], row["p"], row["kernel"], row["causal"], row["pass"],
                 constexprs or "-", _cell(row["num_warps"]), _cell(row["registers"]), _cell(row["stack_bytes"]),
                 _cell(row["shared_bytes"], "{:,}"), cores, _cell(row["compile_s"], "{:.1f}"),
                 "ok" if not row["failures"] else "FAIL: " + "; ".join(row["failures"])]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def write_report_json(path, rows):
    """The rows as JSON, with the Triton version, the target and the date."""
    import triton

    target = dict(backend=TARGET[0], arch=f"sm_{TARGET[1]}", warp_size=TARGET[2])
    report = dict(triton=triton.__version__, target=target,
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  limits=dict(stack_bytes=MAX_STACK_BYTES, registers=MAX_REGISTERS, shared_sm90=MAX_SHARED_SM90,
                              shared_sm86_at_small_D=MAX_SHARED_SM86, small_D=SMALL_HEAD_DIM),
                  ok=not any(row["failures"] for row in rows), rows=rows)
    with open(path, "w") as f:
        json.dump(report, f, indent=1, default=str)


# ---------------------------------------------------------------------------------------------


def report(configs, workers=2, api_module=KERNELS_MODULE):
    """Collect (in a clean worker), compile and check: the rows, or None when the kernels package
    ``api_module`` has no ``forward`` / ``backward`` yet."""
    with clean_pool(1) as pool:  # the launches as a GPU process records them (DOT not "emulate")
        pairs = pool.submit(collect_jobs_or_none, configs, api_module).result()
    if pairs is None:
        return None
    distinct = list(distinct_jobs(pairs).values())
    results = compile_all([job for job, _ in distinct], workers)
    return [make_row(job, configs_, result) for (job, configs_), result in zip(distinct, results)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="compiling processes (default 2)")
    parser.add_argument("--out", metavar="PATH", help="results/<folder>/<name>: write <name>.json and its manifest entry")
    parser.add_argument("--no_fail", action="store_true", help="exit 0 even when a limit is missed")
    parser.add_argument("--D", default=",".join(map(str, D_VALUES)), help="head dims D = Dv (comma list)")
    parser.add_argument("--dtype", default=",".join(DTYPES), help="dtypes (comma list)")
    args = parser.parse_args(argv)
    configs = configurations([int(d) for d in args.D.split(",")], [d.strip() for d in args.dtype.split(",")])
    import provenance

    commit = provenance.git_commit()  # when the run starts: the code that made the rows
    rows = report(configs, args.workers)
    if rows is None:
        print("attention.fastmax.kernels has no forward / backward yet: nothing to compile", file=sys.stderr)
        return 2
    print(markdown_table(rows))
    failed = [row for row in rows if row["failures"]]
    print(f"\n{len(rows)} distinct kernels for sm_{TARGET[1]}, {len(failed)} missing a limit")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        write_report_json(args.out + ".json", rows)
        command = shlex.join(["python", "-m", "scripts.bench.kernel_report", *(sys.argv[1:] if argv is None else argv)])
        provenance.record(args.out, commit=commit, command=command, extra={"workers": args.workers})
    return 1 if failed and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
