#!/usr/bin/python3
"""run_vs_ddp.py — time training steps of compiled plans under `pcgc run` (MPI,
CPU backend) against PyTorch DistributedDataParallel over gloo on the same
shapes, compare pcgc compile's default plan with data parallel, and compare
the simulator's prediction of every plan with its measured step time.

    /usr/bin/python3 benchmarks/run_vs_ddp.py [--pcgc build/pcgc] [--steps 20] [--warmup 3]
        [--rounds 1] [--models mlp,cnn,transformer-block] [--procs 1,2,4] [--out FILE.md]

Needs Debian's python3-torch (with gloo) and Open MPI. For each model of
models/ and process count N:

  1. data parallel: `pcgc compile M --machine cpu-N --choice dp=N --budget 0`
     (cpu-local and dp=1 for N = 1), trained by `pcgc run PLAN --optimizer sgd
     --lr 0.01 --no-dropout`, against DDP on N spawned processes, each with
     its 1/N of the same global batch; both use max(1, cores / N) BLAS threads
     per process (pcgc run's default; torch.set_num_threads in PyTorch);
  2. for N > 1, the plan `pcgc compile M --machine cpu-N` chooses by default,
     timed the same way, against data parallel;
  3. `pcgc simulate PLAN --machine cpu-N --optimizer sgd --profile DB` for
     every plan, where DB merges `pcgc profile --no-dropout` (the gradients
     training needs, as `pcgc run` computes them: none for data inputs)
     of the model at every per-process batch B/N and at B (a tensor-parallel
     plan's kernels see the whole batch) with the BLAS threads of N processes,
     max(1, cores / N), measured beside N - 1 copies of the measurement
     (`--copies N`: the N processes of the run contend for memory and cores as
     the copies do), with the all-reduces of N processes measured too
     (`--links N`: simulate then takes their measured times instead of the
     machine file's link): one database per process count (pieces of other shapes,
     such as tensor-parallel weight slices, fall back to the roofline); also the
     roofline alone (no --profile).

A step time is the median of --steps steps after --warmup warm-up steps: for
pcgc, the "(T ms)" of each step that rank 0 prints (step start to the loss
reduced to rank 0); for PyTorch, rank 0's wall time of zero_grad, forward,
backward (with DDP's allreduce), SGD step and a barrier, after a barrier
before the first step. The tables also give the ratio of the fastest steps,
which other load on the machine disturbs least. With --rounds R every plan and DDP run is timed R
times, in turn, and the fastest median kept. Each round of a process count first measures its
own profile database, and a plan's prediction uses the database of the round whose median is
reported: the host's speed drifts by up to 2x over minutes, and a profile taken minutes away
from the run it predicts carries that drift into the error. Each timing also reports how many
cores processes outside the benchmark kept busy meanwhile (from /proc/stat
less this process's and its children's CPU time): on a shared machine that
column says which rows to distrust. A full run takes about 6 minutes on 2
cores per round; run it on an otherwise idle machine. pcgc runs from a private
copy of --pcgc, so a rebuild during the run changes nothing.
"""
import argparse
import datetime
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_step_vs_torch as T  # noqa: E402  (the PyTorch builders of the shipped models)

import torch  # noqa: E402  (train_step_vs_torch exits with a hint when it is missing)
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LR = 0.01


# ---------------------------------------------------------------- helpers

def threads_for(n):
    """BLAS threads per process: pcgc run's default, cores / processes, at least 1."""
    return max(1, (os.cpu_count() or 1) // n)


def machine_for(n):
    return "cpu-local" if n == 1 else f"cpu-{n}"


def model_batch(model):
    m = re.search(r"^const\s+B\s*=\s*(\d+)", open(os.path.join(ROOT, "models", model + ".pcg")).read(), re.M)
    return int(m.group(1))


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def cpu_seconds():
    """(CPU seconds the whole machine has been busy, CPU seconds of this process and its waited-for children)."""
    f = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    busy = (sum(f[:8]) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait
    us = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return busy, sum(u.ru_utime + u.ru_stime for u in us)


def others_load(f, *args):
    """f(*args), and the cores that processes other than this benchmark's kept busy meanwhile on average."""
    (b0, m0), t0 = cpu_seconds(), time.perf_counter()
    v = f(*args)
    (b1, m1), t1 = cpu_seconds(), time.perf_counter()
    return v, max(0.0, ((b1 - b0) - (m1 - m0)) / (t1 - t0))


def git(*args):
    try:
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


class Failure(Exception):
    """A pcgc command that failed: the command line and the tail of its output."""

    def __init__(self, cmd, text):
        super().__init__(f"{' '.join(cmd)}\n    " + "\n    ".join(text.strip().splitlines()[-6:]))


def pcgc_cmd(cmd, timeout=900):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise Failure(cmd, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def fmt_ms(v):
    return "fail" if v is None else f"{v:.2f}" if v < 100 else f"{v:.1f}"


def fmt_ratio(a, b):
    return "—" if a is None or b is None else f"{a / b:.2f}"


# ---------------------------------------------------------------- pcgc

def compile_plan(pcgc, model, n, default, out):
    cmd = [pcgc, "compile", os.path.join(ROOT, "models", model + ".pcg"), "--machine", machine_for(n)]
    if not default:
        cmd += ["--choice", f"dp={n}", "--budget", "0"]
    cmd += ["-o", out]
    text = pcgc_cmd(cmd)
    m = re.search(r"^strategy: (.*?)(?: on \d+ of \d+ devices)?$", text, re.M)
    return m.group(1) if m else "?"


def pcgc_step_ms(pcgc, plan, n, warmup, steps):
    """Median and minimum of the per-step times rank 0 prints, after the warm-up steps."""
    cmd = [pcgc, "run", plan, "--steps", str(warmup + steps), "--optimizer", "sgd", "--lr", str(LR), "--no-dropout"]
    text = pcgc_cmd(cmd)
    m = re.search(r"on (\d+) process(?:es)? \((\d+) BLAS threads? each\): (\w+)", text)
    if not m or int(m.group(1)) != n or int(m.group(2)) != threads_for(n) or m.group(3) != "sgd":
        raise Failure(cmd, f"expected {n} processes with {threads_for(n)} BLAS threads each, sgd; got:\n{text}")
    ms = [float(t) for t in re.findall(r"^step\s+\d+\s+loss \S+\s+\(([0-9.]+) ms\)", text, re.M)]
    if len(ms) != warmup + steps:
        raise Failure(cmd, f"found {len(ms)} step lines, expected {warmup + steps}:\n{text}")
    return statistics.median(ms[warmup:]), min(ms[warmup:])


def make_profile(pcgc, model, batches, out, tmp, threads=1, copies=1):
    """One database for the model: `pcgc profile --append` at each per-process batch, beside
    copies - 1 copies of the measurement (the device it was measured as is recorded, so
    simulate carries the times to cpu-N)."""
    if os.path.exists(out):
        os.unlink(out)
    for i, b in enumerate(sorted(set(batches), reverse=True)):
        links = ["--links", str(copies)] if copies > 1 and i == 0 else []
        pcgc_cmd([pcgc, "profile", os.path.join(ROOT, "models", model + ".pcg"), "--machine", "cpu-local",
                  "-o", out, "--append", "--threads", str(threads), "--copies", str(copies),
                  "--no-dropout"] + links + ["--set", f"B={b}"])


def simulate_ms(pcgc, plan, n, profile):
    cmd = [pcgc, "simulate", plan, "--machine", machine_for(n), "--optimizer", "sgd"]
    if profile:
        cmd += ["--profile", profile]
    text = pcgc_cmd(cmd)
    m = re.search(r"^\s*iteration\s+([0-9.eE+-]+)\s*(s|ms|us|ns)\b", text, re.M)
    if not m:
        raise Failure(cmd, "no 'iteration' line in:\n" + text)
    return float(m.group(1)) * {"s": 1e3, "ms": 1, "us": 1e-3, "ns": 1e-6}[m.group(2)]


def same_plan(a, b):
    """Whether two plan files hold the same parallel graph and views (predictions and checksum aside)."""
    strip = lambda f: {k: v for k, v in json.load(open(f)).items() if k not in ("predicted", "checksum")}
    return strip(a) == strip(b)


# ---------------------------------------------------------------- PyTorch DDP

def ddp_worker(rank, n, model, threads, warmup, steps, port, result):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    torch.manual_seed(0)
    make, loss_class = T.MODELS[model]
    net, x, y = make()
    b = x.shape[0] // n
    x, y = x[rank * b:(rank + 1) * b].contiguous(), y[rank * b:(rank + 1) * b].contiguous()
    net.train()
    ddp = DDP(net)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    loss_fn = loss_class()
    ms = []
    dist.barrier()
    for _ in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        dist.barrier()
        ms.append((time.perf_counter() - t0) * 1e3)
    if rank == 0:
        with open(result, "w") as f:
            json.dump(ms, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_step_ms(model, n, warmup, steps, tmp):
    result = os.path.join(tmp, f"ddp-{model}-{n}.json")
    t = str(threads_for(n))
    # the spawned interpreters read these before torch starts its pools
    env = dict(OMP_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t, MKL_NUM_THREADS=t, GLOO_SOCKET_IFNAME="lo")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        mp.spawn(ddp_worker, args=(n, model, threads_for(n), warmup, steps, free_port(), result), nprocs=n)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    ms = json.load(open(result))[warmup:]
    return statistics.median(ms), min(ms)


# ---------------------------------------------------------------- tables

def table(title, head, rows, notes=""):
    """The table as plain text and as markdown."""
    w = [max(len(str(c)) for c in col) for col in zip(head, *rows)]
    line = lambda r: "  ".join(str(c).rjust(w[i]) if i else str(c).ljust(w[i]) for i, c in enumerate(r))
    text = "\n".join([title, line(head), *map(line, rows)] + ([notes] if notes else []))
    md = "\n".join([f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                    *("| " + " | ".join(map(str, r)) + " |" for r in rows)] + (["", notes] if notes else []))
    return text, md


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcgc", default=os.path.join(ROOT, "build", "pcgc"))
    ap.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps before them (default 3)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every plan and DDP this many times, in turn, and keep the fastest median (default 1)")
    ap.add_argument("--models", default="mlp,cnn,transformer-block")
    ap.add_argument("--procs", default="1,2,4")
    ap.add_argument("--out", help="also write the header and tables as markdown to this file")
    a = ap.parse_args()
    if not os.access(a.pcgc, os.X_OK):
        sys.exit(f"{a.pcgc}: not found; build pcgc first (scripts/main.sh)")
    models = a.models.split(",")
    procs = [int(p) for p in a.procs.split(",")]
    for m in models:
        if m not in T.MODELS:
            sys.exit(f"--models: no PyTorch builder for '{m}' (have {', '.join(T.MODELS)})")
    for n in procs:
        if n != 1 and not os.path.exists(os.path.join(ROOT, "machines", f"cpu-{n}.machine")):
            sys.exit(f"--procs: no machines/cpu-{n}.machine")

    load0 = open("/proc/loadavg").read().split()[:3]
    dirty = " (working tree has uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    header = [f"machine: {os.cpu_count()} cores, {cpu_model()}; torch {torch.__version__}; "
              f"{datetime.date.today().isoformat()}",
              f"commit: {git('rev-parse', '--short', 'HEAD') or 'unknown'}{dirty}; pcgc binary {a.pcgc} "
              f"(built {datetime.datetime.fromtimestamp(os.path.getmtime(a.pcgc)):%Y-%m-%d %H:%M})",
              f"method: median of {a.steps} steps after {a.warmup} warm-up steps"
              + (f" (the fastest of {a.rounds} rounds)" if a.rounds > 1 else "") + f", SGD lr {LR}, no dropout, "
              f"BLAS threads per process = max(1, {os.cpu_count()} cores / processes)"]
    print("\n".join(header), flush=True)

    failures = []

    def attempt(f, *args):
        try:
            return f(*args)
        except Failure as e:
            failures.append(str(e))
            print(f"  FAILED: {e}", file=sys.stderr, flush=True)
        except (subprocess.TimeoutExpired, mp.ProcessRaisedException, mp.ProcessExitedException) as e:
            failures.append(f"{f.__name__}{args}: {e}")
            print(f"  FAILED: {f.__name__}: {e}", file=sys.stderr, flush=True)
        return None

    dp_rows, auto_rows, sim_rows = [], [], []
    with tempfile.TemporaryDirectory(prefix="run_vs_ddp.") as tmp:
        # a private copy: a rebuild of build/pcgc during the run must not change or remove it
        shutil.copy2(a.pcgc, os.path.join(tmp, "pcgc"))
        a.pcgc = os.path.join(tmp, "pcgc")
        for m in models:
            B = model_batch(m)
            for n in procs:
                th = threads_for(n)
                # B/n for data parallelism, and B whole: a tensor-parallel plan's kernels
                # see the whole batch (with slices of the weights) on every process
                bs = sorted({B // n, B}, reverse=True)
                plans = {}  # kind -> (plan file, strategy text)
                for kind in ["dp"] + (["default"] if n > 1 else []):
                    plan = os.path.join(tmp, f"{m}-{kind}{n}.json")
                    strategy = attempt(compile_plan, a.pcgc, m, n, kind == "default", plan)
                    if strategy is not None:
                        plans[kind] = (plan, strategy)
                # kind -> ((median ms, fastest step ms), cores busy with other work meanwhile, round)
                # of the round with the lowest median; fastest[kind]: the fastest step of all rounds;
                # dbs[r]: round r's database, measured right before its timings, so that a plan's
                # prediction and its measurement see the machine in the same state
                best, fastest, dbs = {}, {}, {}
                for r in range(a.rounds):
                    # one database per process count and round: a process measured on threads_for(n)
                    # threads at its batch B/n beside n - 1 copies of the measurement (--copies n)
                    db = os.path.join(tmp, f"{m}.{n}p.r{r}.prof.json")
                    print(f"{m} on {n}: profiling at batch {', '.join(str(b) for b in bs)} on {th} "
                          f"thread{'s' if th > 1 else ''} beside {n - 1} cop{'y' if n == 2 else 'ies'}"
                          + (f", round {r + 1}" if a.rounds > 1 else ""), file=sys.stderr, flush=True)
                    if attempt(make_profile, a.pcgc, m, bs, db, tmp, th, n) is not None or os.path.exists(db):
                        dbs[r] = db
                    for kind in list(plans) + ["ddp"]:
                        print(f"{m} on {n}: {kind}" + (f", round {r + 1}" if a.rounds > 1 else ""),
                              file=sys.stderr, flush=True)
                        if kind == "ddp":
                            got = attempt(others_load, ddp_step_ms, m, n, a.warmup, a.steps, tmp)
                        else:
                            got = attempt(others_load, pcgc_step_ms, a.pcgc, plans[kind][0], n, a.warmup, a.steps)
                        if got and (kind not in best or got[0][0] < best[kind][0][0]):
                            best[kind] = (*got, r)
                        if got:
                            fastest[kind] = min(fastest.get(kind, got[0][1]), got[0][1])
                ms = {k: best[k][0][0] if k in best else None for k in ("dp", "default", "ddp")}
                fs = {k: fastest.get(k) for k in ("dp", "default", "ddp")}
                load = {k: "—" if k not in best else f"{best[k][1]:.1f}" for k in ("dp", "default", "ddp")}
                for kind, (plan, strategy) in plans.items():
                    # predicted from the database of the round whose median is reported
                    db = dbs.get(best[kind][2]) if kind in best else None
                    nolinks = None  # the same database without the measured link: the machine file's
                    if db and n > 1:
                        d = json.load(open(db))
                        if d.pop("links", None) is not None:
                            nolinks = db + ".nolinks.json"
                            json.dump(d, open(nolinks, "w"))
                    pred = attempt(simulate_ms, a.pcgc, plan, n, db) if db else None
                    pred0 = attempt(simulate_ms, a.pcgc, plan, n, nolinks) if nolinks else None
                    err0 = "—" if pred0 is None or ms[kind] is None else f"{100 * (pred0 / ms[kind] - 1):+.1f}%"
                    roof = attempt(simulate_ms, a.pcgc, plan, n, None)
                    err = "—" if pred is None or ms[kind] is None else f"{100 * (pred / ms[kind] - 1):+.1f}%"
                    roof_err = "—" if roof is None or ms[kind] is None else f"{100 * (roof / ms[kind] - 1):+.1f}%"
                    f_err = "—" if pred is None or fs[kind] is None else f"{100 * (pred / fs[kind] - 1):+.1f}%"
                    sim_rows.append([m, n, f"{kind}: {strategy}", fmt_ms(pred), fmt_ms(ms[kind]), err,
                                     fmt_ms(fs[kind]), f_err, err0, fmt_ms(roof), roof_err])
                dp_rows.append([m, B, n, threads_for(n), fmt_ms(ms["dp"]), fmt_ms(ms["ddp"]),
                                fmt_ratio(ms["dp"], ms["ddp"]), fmt_ratio(fs["dp"], fs["ddp"]),
                                f"{load['dp']} / {load['ddp']}"])
                if n > 1:
                    strategy = plans.get("default", (None, "compile failed"))[1]
                    if "default" in plans and "dp" in plans and same_plan(plans["default"][0], plans["dp"][0]):
                        strategy += " (the dp plan)"
                    auto_rows.append([m, n, strategy, fmt_ms(ms["default"]),
                                      fmt_ms(ms["dp"]), fmt_ratio(ms["default"], ms["dp"]),
                                      fmt_ratio(fs["default"], fs["dp"]),
                                      f"{load['default']} / {load['dp']}"])

    header.append(f"load average (1, 5, 15 min) {' '.join(load0)} at the start, "
                  f"{' '.join(open('/proc/loadavg').read().split()[:3])} at the end")
    print(header[-1])
    tables = [
        table("Data parallel: pcgc run against PyTorch DDP (gloo), ms per step",
              ["model", "batch", "procs", "threads", "pcgc ms", "DDP ms", "pcgc/DDP", "fastest steps", "others' cores"], dp_rows,
              "pcgc/DDP: target <= 1.00. Global batch as in models/*.pcg, 1/procs of it per process. "
              "fastest steps: the same ratio of the fastest step of each (less sensitive to other load). "
              "others' cores: CPU cores that processes outside this benchmark kept busy on average during "
              "the pcgc / the DDP run (0.0 on an idle machine)."),
        table("pcgc compile's default plan against data parallel, ms per step",
              ["model", "procs", "default plan", "default ms", "dp ms", "default/dp", "fastest steps", "others' cores"], auto_rows,
              "default/dp: target <= 1.00 (the default plan at least as fast as data parallel); "
              "'(the dp plan)': the default strategy file equals the dp one, so the ratio shows only noise. "
              "others' cores: during the default / the dp run."),
        table("Simulator against pcgc run, ms per step",
              ["model", "procs", "plan", "predicted", "measured", "error", "fastest step", "error vs fastest",
               "error, link of the machine file", "roofline", "roofline error"], sim_rows,
              "predicted: `pcgc simulate PLAN --optimizer sgd --profile DB` (kernels measured by `pcgc profile` "
              "at each per-process batch with the BLAS threads each process runs with, beside N - 1 copies of the "
              "measurement: --copies N) and the all-reduces of N processes (--links N); 'link of the machine "
              "file': the same database without the measured link; roofline: without --profile. "
              "measured: the median step as in the tables above. error = predicted/measured - 1; target within 15%."),
    ]
    for text, _ in tables:
        print("\n" + text)
    if failures:
        print("\nfailed commands:")
        for f in failures:
            print("  " + f)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n\n".join(["\n".join(h + "  " for h in header)] + [md for _, md in tables]) + "\n")
            if failures:
                f.write("\nFailed commands:\n\n" + "\n".join("    " + line for x in failures
                                                              for line in x.splitlines()) + "\n")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
