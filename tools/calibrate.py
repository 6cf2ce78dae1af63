"""Fit the roofline's calibration on Vidur's measured operator profiles, write it into the
package (kvsched/timing/hardware/calibration.yaml) and report its accuracy on rows it did not see.

    .venv/bin/python tools/calibrate.py [--profiles ../shared/vidur-profiling] [--no-write]

What is fitted, per GPU (A100 and H100, the GPUs measured): the GEMMs' compute and memory
efficiencies, the knee between their two regimes (and how it sharpens with the GEMM's weight
bytes, seen across the training models' GEMMs of 33-235 MB) and a per-kernel cost, with the
compute counted in whole tiles of GEMM_TILE token rows (chosen by training loss: `--search-tile`
prints it for each candidate); the element-wise
kernels' bandwidth efficiency and cost; attention's efficiencies and cost (A100 only: there is no
H100 attention profile, so H100 borrows A100's attention efficiencies); all-reduce latency and
bus-bandwidth efficiency. Fitting minimises the squared log ratio (a relative error) over a
random 70% of the rows of Llama-2-7B at TP 1 (and Llama-3-8B's dense layers on A100); Llama-2-70B
at TP 2 and 4 is never used in fitting.

The reference step times are built from the profiles as Vidur's predictor builds them: per layer,
the dense operators at the step's token count, attention prefill per chunk, attention decode,
two all-reduces when TP > 1, times the layers (no LM head, no CPU overhead: the roofline's LM
head and step overhead are left out of the comparison).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from kvsched.timing.hardware import Calibration, load_gpu, load_model
from kvsched.timing.roofline import BatchShape, RooflineStep

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PROFILES = REPO.parent / "shared" / "vidur-profiling"
OUTPUT = REPO / "kvsched" / "timing" / "hardware" / "calibration.yaml"
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
MODELS = {"Llama-2-7b-hf": "meta-llama/Llama-2-7b-hf",
          "Llama-2-70b-hf": "meta-llama/Llama-2-70b-hf",
          "Meta-Llama-3-8B": "meta-llama/Meta-Llama-3-8B"}
GPUS = {"a100": "a100-80gb", "h100": "h100-sxm"}  # Vidur profiled A100 80GB and H100 SXM (DGX)
TRAIN_SHARE = 0.7
SEED = 0
# Token rows per GEMM tile in the compute term. 64 gives the lowest training loss of
# TILE_CANDIDATES on both GPUs (`--search-tile`); 0 would be no tiling.
GEMM_TILE = 64
TILE_CANDIDATES = (0, 16, 32, 64, 128)

START = Calibration(linear_compute_eff=0.7, linear_memory_eff=0.75, knee=2.0,
                    kernel_overhead=5e-6, elementwise_memory_eff=0.5, elementwise_overhead=3e-6,
                    attn_prefill_compute_eff=0.3, attn_decode_memory_eff=0.7, attn_overhead=1e-5,
                    allreduce_latency=1e-5, allreduce_bw_eff=0.6)

# the uncalibrated roofline, to show what calibration buys
DATASHEET = Calibration(linear_compute_eff=1, linear_memory_eff=1, knee=64, kernel_overhead=0,
                        elementwise_memory_eff=1, elementwise_overhead=0,
                        attn_prefill_compute_eff=1, attn_decode_memory_eff=1, attn_overhead=0,
                        allreduce_latency=0, allreduce_bw_eff=1)


# -- the profiles -------------------------------------------------------------------------


def split(n: int, rng: np.random.Generator) -> np.ndarray:
    """A boolean mask: True for the training rows."""
    return rng.random(n) < TRAIN_SHARE


def read_dense(folder: Path) -> dict[tuple[str, str, int], pd.DataFrame]:
    """mlp/<gpu>__<model>__tp<k>.csv, duplicated token counts averaged, times in seconds."""
    tables = {}
    for path in sorted((folder / "mlp").glob("*.csv")):
        gpu, model, tp = path.stem.split("__")
        frame = pd.read_csv(path).groupby("num_tokens", as_index=False).mean()
        frame[list(GEMMS + ELEMENTWISE)] *= 1e-3
        tables[(gpu, model, int(tp.removeprefix("tp")))] = frame
    return tables


def read_attention(folder: Path) -> dict[tuple[str, str, int], pd.DataFrame]:
    tables = {}
    for path in sorted((folder / "attention").glob("*.csv")):
        gpu, model, tp = path.name.split(".")[0].split("__")
        frame = pd.read_csv(path)
        keys = ["kind", "batch_size", "prefill_chunk_size", "kv_cache_size"]
        frame = frame.groupby(keys, as_index=False).median_ms.mean()
        frame["time"] = frame.pop("median_ms") * 1e-3
        tables[(gpu, model, int(tp.removeprefix("tp")))] = frame
    return tables


def read_allreduce(folder: Path, gpu: str) -> pd.DataFrame:
    """One node's all-reduce (every worker on one NVLink domain), ranks averaged."""
    frame = pd.read_csv(folder / "all_reduce" / f"{gpu}_dgx.csv")
    frame = frame[frame.num_workers == frame.devices_per_node]
    frame = frame.groupby(["num_workers", "size"], as_index=False).median_ms.mean()
    frame["time"] = frame.pop("median_ms") * 1e-3
    return frame[frame["size"] <= 256 * 2**20]


# -- fitting ------------------------------------------------------------------------------


def nelder_mead(loss: Callable[[np.ndarray], float], x0: np.ndarray, steps: int = 1500,
                scale: float = 0.5) -> np.ndarray:
    """Minimise `loss` (small, smooth-ish problems: a handful of parameters)."""
    simplex = [x0] + [x0 + scale * np.eye(len(x0))[i] for i in range(len(x0))]
    values = [loss(x) for x in simplex]
    for _ in range(steps):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centroid + (centroid - worst)
        fr = loss(reflected)
        if fr < values[0]:
            expanded = centroid + 2 * (centroid - worst)
            fe = loss(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (worst - centroid)
            fc = loss(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best + 0.5 * (x - best) for x in simplex]
                values = [loss(x) for x in simplex]
        if max(values) - min(values) < 1e-10:
            break
    return simplex[int(np.argmin(values))]


def eff(x: float) -> float:
    return float(1 / (1 + np.exp(-x)))


def logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


def log_error(predicted: Sequence[float], measured: Sequence[float]) -> float:
    ratio = np.log(np.asarray(predicted) / np.asarray(measured))
    return float(np.mean(ratio ** 2))


def roofline(model: str, gpu: str, tp: int, calibration: Calibration) -> RooflineStep:
    return RooflineStep(MODELS[model], GPUS[gpu], tp, calibration)


def fit_gemms(cal: Calibration, gpu: str, frames: list[tuple[str, int, pd.DataFrame]],
              knee_per_decade: float | None = None) -> tuple[Calibration, float]:
    """GEMM efficiencies, knee (its change with the GEMM's size too, unless given) and
    kernel cost at the calibration's `gemm_tile`, and the training loss they reach."""
    def gemm_cal(x: np.ndarray) -> Calibration:
        slope = float(x[4]) if knee_per_decade is None else knee_per_decade
        return replace(cal, linear_compute_eff=eff(x[0]), linear_memory_eff=eff(x[1]),
                       knee=1 + float(np.exp(x[2])), kernel_overhead=float(np.exp(x[3])),
                       knee_per_decade=slope)

    def gemm_loss(x: np.ndarray) -> float:
        c = gemm_cal(x)
        predicted, measured = [], []
        for model, tp, frame in frames:
            step = roofline(model, gpu, tp, c)
            for tokens, *times in frame[["num_tokens", *GEMMS]].itertuples(index=False):
                predicted += step.gemm_times(int(tokens))
                measured += times
        return log_error(predicted, measured)

    x = nelder_mead(gemm_loss, np.array([logit(cal.linear_compute_eff),
                                         logit(cal.linear_memory_eff), np.log(cal.knee - 1),
                                         np.log(cal.kernel_overhead), cal.knee_per_decade]
                                        [:4 if knee_per_decade is not None else 5]))
    return gemm_cal(x), gemm_loss(x)


def fit_dense(cal: Calibration, gpu: str, frames: list[tuple[str, int, pd.DataFrame]],
              knee_per_decade: float | None = None) -> Calibration:
    """The GEMMs (`fit_gemms`), then the element-wise kernels."""
    cal, _ = fit_gemms(cal, gpu, frames, knee_per_decade)

    def ew_cal(x: np.ndarray) -> Calibration:
        return replace(cal, elementwise_memory_eff=eff(x[0]),
                       elementwise_overhead=float(np.exp(x[1])))

    def ew_loss(x: np.ndarray) -> float:
        c = ew_cal(x)
        predicted, measured = [], []
        for model, tp, frame in frames:
            step = roofline(model, gpu, tp, c)
            predicted += [step.elementwise_time(int(t)) for t in frame.num_tokens]
            measured += list(frame[list(ELEMENTWISE)].sum(axis=1))
        return log_error(predicted, measured)

    x = nelder_mead(ew_loss, np.array([logit(cal.elementwise_memory_eff),
                                       np.log(cal.elementwise_overhead)]))
    return ew_cal(x)


def attention_time(step: RooflineStep, row: tuple) -> float:
    kind, batch, chunk, kv = row
    if kind == "prefill":
        return step.prefill_attention_time(((int(chunk), int(kv)),) * int(batch))
    return step.decode_attention_time(int(batch) * int(kv))


def fit_attention(cal: Calibration, gpu: str, model: str, tp: int, frame: pd.DataFrame
                  ) -> Calibration:
    rows = list(frame[["kind", "batch_size", "prefill_chunk_size", "kv_cache_size"]]
                .itertuples(index=False))

    def attn_cal(x: np.ndarray) -> Calibration:
        return replace(cal, attn_prefill_compute_eff=eff(x[0]), attn_decode_memory_eff=eff(x[1]),
                       attn_overhead=float(np.exp(x[2])))

    def loss(x: np.ndarray) -> float:
        step = roofline(model, gpu, tp, attn_cal(x))
        return log_error([attention_time(step, row) for row in rows], frame.time)

    x = nelder_mead(loss, np.array([logit(cal.attn_prefill_compute_eff),
                                    logit(cal.attn_decode_memory_eff),
                                    np.log(cal.attn_overhead)]))
    return attn_cal(x)


def fit_allreduce(cal: Calibration, gpu: str, frame: pd.DataFrame) -> Calibration:
    """Latency and bus-bandwidth efficiency; the profile's sizes are bytes of bf16."""
    interconnect = load_gpu(GPUS[gpu]).interconnect_bw

    def ar_time(c: Calibration, workers: np.ndarray, size: np.ndarray) -> np.ndarray:
        ring = 2 * (workers - 1) / workers * size
        return c.allreduce_latency + ring / (interconnect / 2 * c.allreduce_bw_eff)

    def ar_cal(x: np.ndarray) -> Calibration:
        return replace(cal, allreduce_latency=float(np.exp(x[0])), allreduce_bw_eff=eff(x[1]))

    def loss(x: np.ndarray) -> float:
        predicted = ar_time(ar_cal(x), frame.num_workers.to_numpy(), frame["size"].to_numpy())
        return log_error(predicted, frame.time)

    x = nelder_mead(loss, np.array([np.log(cal.allreduce_latency), logit(cal.allreduce_bw_eff)]))
    return ar_cal(x)


# -- reference steps from the profiles ---------------------------------------------------------


class Reference:
    """Step times composed from one (gpu, model, tp)'s measured operators, as Vidur does."""

    def __init__(self, dense: pd.DataFrame, allreduce: pd.DataFrame, layers: int, hidden: int,
                 tp: int) -> None:
        self.tokens = dense.num_tokens.to_numpy(dtype=float)
        self.dense = dense[list(GEMMS + ELEMENTWISE)].sum(axis=1).to_numpy()
        self.layers, self.hidden, self.tp = layers, hidden, tp
        ar = allreduce[allreduce.num_workers == tp]
        self.ar_size = np.log(ar["size"].to_numpy(dtype=float))
        self.ar_time = ar.time.to_numpy()

    def dense_time(self, tokens: int) -> float:
        return float(np.interp(tokens, self.tokens, self.dense))

    def allreduce_time(self, tokens: int) -> float:
        if self.tp == 1:
            return 0.0
        size = np.log(tokens * self.hidden * 2.0)
        return 2 * float(np.interp(size, self.ar_size, self.ar_time))

    def step(self, tokens: int, attention: float) -> float:
        return self.layers * (self.dense_time(tokens) + self.allreduce_time(tokens) + attention)


def predicted_layers(step: RooflineStep, shape: BatchShape) -> float:
    """The roofline's step without what Vidur's profiles leave out (LM head, step overhead)."""
    rows = len(shape.prefill_chunks) + shape.num_decodes
    cal = step.calibration
    assert cal is not None
    return step.duration_shape(shape) - step.head_time(rows) - cal.step_overhead


def batches(attention: pd.DataFrame, reference: Reference, rng: np.random.Generator,
            limit: int = 600) -> dict[str, list[tuple[BatchShape, float]]]:
    """Prefill-only, decode-only and mixed (one prefill + a decode batch) batches with their
    reference times, from the attention rows given and the dense profile."""
    prefill = attention[(attention.kind == "prefill") & (attention.batch_size == 1)]
    decode = attention[attention.kind == "decode"]
    out: dict[str, list[tuple[BatchShape, float]]] = {"prefill": [], "decode": [], "mixed": []}
    for row in prefill.sample(min(limit, len(prefill)), random_state=rng).itertuples():
        chunk, kv = int(row.prefill_chunk_size), int(row.kv_cache_size)
        out["prefill"].append((BatchShape(((chunk, kv),)), reference.step(chunk, row.time)))
    for row in decode.sample(min(limit, len(decode)), random_state=rng).itertuples():
        n, kv = int(row.batch_size), int(row.kv_cache_size)
        out["decode"].append((BatchShape((), n, n * kv), reference.step(n, row.time)))
    pairs = len(prefill) * len(decode)
    for index in rng.choice(pairs, size=min(limit, pairs), replace=False) if pairs else ():
        p, d = prefill.iloc[int(index) // len(decode)], decode.iloc[int(index) % len(decode)]
        chunk, kv = int(p.prefill_chunk_size), int(p.kv_cache_size)
        n, dkv = int(d.batch_size), int(d.kv_cache_size)
        if chunk + n > reference.tokens[-1]:
            continue
        shape = BatchShape(((chunk, kv),), n, n * dkv)
        out["mixed"].append((shape, reference.step(chunk + n, p.time + d.time)))
    return out


def errors(step: RooflineStep, cases: list[tuple[BatchShape, float]]) -> np.ndarray:
    predicted = np.array([predicted_layers(step, shape) for shape, _ in cases])
    measured = np.array([value for _, value in cases])
    return np.abs(predicted / measured - 1) * 100


def dense_errors(step: RooflineStep, reference: Reference, tokens: np.ndarray) -> np.ndarray:
    predicted = np.array([step.layer_time(int(t)) for t in tokens])
    measured = np.array([reference.dense_time(int(t)) + reference.allreduce_time(int(t))
                         for t in tokens])
    return np.abs(predicted / measured - 1) * 100


def row(label: str, kind: str, err: np.ndarray) -> list[str]:
    if not len(err):
        return [label, kind, "0", "-", "-"]
    return [label, kind, str(len(err)), f"{np.median(err):.1f}", f"{np.percentile(err, 90):.1f}"]


# -- main -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=Path, default=DEFAULT_PROFILES)
    parser.add_argument("--no-write", action="store_true", help="Report only.")
    parser.add_argument("--search-tile", action="store_true",
                        help="Also print each GPU's GEMM training loss for every gemm_tile "
                             "candidate (how GEMM_TILE was chosen).")
    parser.add_argument("--check", action="store_true",
                        help="Write nothing; exit 1 if the shipped calibration is not this fit.")
    args = parser.parse_args(argv)
    folder: Path = args.profiles
    if not (folder / "mlp").is_dir():
        print(f"calibrate: no profiles at {folder}/ (give --profiles): nothing fitted")
        return 0
    rng = np.random.default_rng(SEED)
    dense = read_dense(folder)
    attention = read_attention(folder)
    allreduce = {gpu: read_allreduce(folder, gpu) for gpu in GPUS}
    masks = {key: split(len(frame), rng) for key, frame in dense.items()}
    attn_masks = {key: split(len(frame), rng) for key, frame in attention.items()}
    ar_masks = {gpu: split(len(frame), rng) for gpu, frame in allreduce.items()}

    fitted: dict[str, Calibration] = {}
    for gpu in GPUS:
        train = [(model, tp, frame[masks[(g, model, tp)]])
                 for (g, model, tp), frame in dense.items() if g == gpu and tp == 1]
        if args.search_tile:
            for tile in TILE_CANDIDATES:
                _, loss = fit_gemms(replace(START, gemm_tile=float(tile)), gpu, train)
                print(f"{gpu} gemm_tile {tile}: training loss {loss * 1e3:.3f}e-3")
        # How the knee sharpens with a GEMM's size is seen across each model's four GEMMs
        # (Llama-2-7B's are 33-180 MB): each GPU fits its own.
        cal = fit_dense(replace(START, gemm_tile=float(GEMM_TILE)), gpu, train)
        key = ("a100", "Llama-2-7b-hf", 1)
        if gpu == "a100":
            cal = fit_attention(cal, gpu, "Llama-2-7b-hf", 1, attention[key][attn_masks[key]])
        else:  # no H100 attention profile: A100's attention efficiencies
            a100 = fitted["a100"]
            cal = replace(cal, attn_prefill_compute_eff=a100.attn_prefill_compute_eff,
                          attn_decode_memory_eff=a100.attn_decode_memory_eff,
                          attn_overhead=a100.attn_overhead)
        cal = fit_allreduce(cal, gpu, allreduce[gpu][ar_masks[gpu]])
        fitted[gpu] = replace(cal, source=f"tools/calibrate.py on Vidur's {gpu.upper()} profiles "
                              f"(train rows: {', '.join(m for m, _, _ in train)} at TP 1"
                              + (", attention of Llama-2-7b-hf" if gpu == "a100" else
                                 "; attention efficiencies from A100")
                              + ")")

    lines = ["| profile | batches | n | median abs % error | p90 abs % error |",
             "|---|---|---|---|---|"]
    table: list[list[str]] = []

    def reference_of(gpu: str, model: str, tp: int) -> Reference:
        shape = load_model(MODELS[model])
        return Reference(dense[(gpu, model, tp)], allreduce[gpu], shape.layers, shape.hidden, tp)

    for (gpu, model, tp), frame in attention.items():
        step = roofline(model, gpu, tp, fitted[gpu])
        seen = model == "Llama-2-7b-hf"
        rows = frame[~attn_masks[(gpu, model, tp)]] if seen else frame
        label = (f"{gpu.upper()} {model} TP{tp}, "
                 + ("held-out rows" if seen else "model not used in fitting"))
        datasheet = roofline(model, gpu, tp, DATASHEET)
        for kind, cases in batches(rows, reference_of(gpu, model, tp), rng).items():
            table.append(row(label, kind, errors(step, cases)))
            if not seen:
                table.append(row(f"{gpu.upper()} {model} TP{tp}, datasheet roofline "
                                 "(no calibration)", kind, errors(datasheet, cases)))
    for (gpu, model, tp), frame in dense.items():
        seen = tp == 1
        tokens = frame.num_tokens.to_numpy()[~masks[(gpu, model, tp)] if seen else slice(None)]
        reference = reference_of(gpu, model, tp)
        label = (f"{gpu.upper()} {model} TP{tp}, dense layers"
                 + (" (held-out token counts)" if seen else ", not used in fitting"))
        step = roofline(model, gpu, tp, fitted[gpu])
        for kind, chosen in (("decode-sized (<=256 tokens)", tokens[tokens <= 256]),
                             ("prefill-sized (>256 tokens)", tokens[tokens > 256])):
            table.append(row(label, kind, dense_errors(step, reference, chosen)))
        if gpu == "h100":  # the A100 calibration on a GPU it never saw (H100 datasheet peaks)
            step = roofline(model, gpu, tp, replace(fitted["a100"],
                                                    allreduce_latency=fitted[gpu].allreduce_latency,
                                                    allreduce_bw_eff=fitted[gpu].allreduce_bw_eff))
            label = f"H100 {model} TP{tp}, dense layers, A100 calibration (GPU not used)"
            for kind, chosen in (("decode-sized (<=256 tokens)", tokens[tokens <= 256]),
                                 ("prefill-sized (>256 tokens)", tokens[tokens > 256])):
                table.append(row(label, kind, dense_errors(step, reference, chosen)))
    lines += ["| " + " | ".join(cells) + " |" for cells in table]
    print("\n".join(lines))

    if args.check:
        stale = differences(fitted, OUTPUT.read_text(encoding="utf-8"))
        print("\n".join(stale) or f"{OUTPUT.relative_to(REPO)} is this fit")
        return 1 if stale else 0
    if not args.no_write:
        OUTPUT.write_text(render(fitted), encoding="utf-8")
        print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


def render(fitted: dict[str, Calibration]) -> str:
    """The calibration file's text."""
    def entry(cal: Calibration, note: str = "") -> dict[str, object]:
        values: dict[str, object] = {k: (float(f"{v:.6g}") if isinstance(v, float) else v)
                                     for k, v in asdict(cal).items()}
        if note:
            values["source"] = f"{cal.source}; {note}"
        return values

    a100, h100 = fitted["a100"], fitted["h100"]
    table = {
        "a100-80gb": entry(a100),
        "a100-40gb": entry(a100, "A100 80GB's fit (same silicon)"),
        "h100-sxm": entry(h100),
        "h100-pcie": entry(h100, "transferred from H100 SXM (same Hopper generation)"),
        "h200": entry(h100, "transferred from H100 SXM (same Hopper generation)"),
        "l40s": entry(a100, "transferred from A100 (not measured)"),
        "a40": entry(a100, "transferred from A100 (not measured)"),
        "default": entry(a100, "transferred from A100 (not measured)"),
    }
    header = ("# Written by tools/calibrate.py from Vidur's measured operator profiles:\n"
              "# do not edit by hand, rerun the tool. Keys are GPU names of gpus.yaml;\n"
              "# `default` serves any other GPU. Efficiencies are fractions of the\n"
              "# datasheet peak; times in seconds. step_overhead (CPU, sampler) is not\n"
              "# in the profiles and stays 0.\n")
    return header + yaml.safe_dump(table, sort_keys=False, width=100)


def differences(fitted: dict[str, Calibration], shipped_text: str,
                rel: float = 1e-3) -> list[str]:
    """Where the shipped calibration differs from a fresh fit (beyond `rel`), one line each."""
    fresh = yaml.safe_load(render(fitted))
    shipped = yaml.safe_load(shipped_text) or {}
    lines = []
    for gpu, values in fresh.items():
        for key, value in values.items():
            old = shipped.get(gpu, {}).get(key)
            if isinstance(value, float):
                same = isinstance(old, float | int) and abs(old - value) <= rel * abs(value)
            else:
                same = old == value
            if not same:
                lines.append(f"{gpu}.{key}: shipped {old}, fitted {value}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
