"""Decoding speed side by side: mt (fp32 and int8) against CTranslate2 (int8) on the same trained
weights and the same test set, greedy and beam 5, measured back to back in one run, each engine in
a process of its own.

    pip install "mt[ctranslate2]"
    python bench/decode.py --model runs/fr_en                  # Multi30k test_2016_flickr, 1,000 sentences
    python bench/decode.py --model runs/fr_en --rounds 3       # best of three rounds per row
    python bench/decode.py --model runs/fr_en --workers 1      # one batch at a time, on every thread
    python bench/decode.py --model runs/fr_en --device cuda --batch-size 500   # mt on a GPU (bf16)
    python bench/decode.py --model runs/opus-shape --test multi30k --max-len 30   # every output 30 tokens:
                                                        # a random-weight model (bench/opus_shape.py) never ends
    python bench/decode.py --model runs/opus-mt-fr-en --engines "mt int8,transformers fp32"   # an imported
                                                        # OPUS-MT model against transformers' own generate
    python bench/decode.py --model runs/fr_en_general runs/fr_en_student --test newstest:newstest2013 \
        --engines "mt int8,mt int8 + shortlist" --peer "mt int8"   # a student against its teacher

Both engines decode `--workers` batches at once (default: one per intra-op thread, mt's own default
on a CPU; CTranslate2's inter_threads), the threads shared out between them. The `mt int8
(processes)` row decodes in that many worker processes instead of threads (`--processes`), started
before the clock as CTranslate2's model is loaded before it. Each round runs every
engine once, in turn, so that a slow minute of a shared machine hits all of them alike; each row
keeps its fastest round. mt's rows run on tcmalloc where it is installed, as `mt.translate` does
(mt/cpu/allocator.py); CTranslate2's on the C library's malloc, as its own users run it. Prints
seconds, sentences/s, BLEU and the time over the peer row's for each row (`--peer`, CTranslate2 int8
unless named; with several runs, the peer engine on the first run), from the fastest rounds and
paired (the median of the rounds' own ratios, steadier on a shared machine), and writes
bench/results/decode.json (`--out`). Each row also says its process's peak memory and its weights' size
on disk (mt's checkpoint; CTranslate2's export). Rows named "+ shortlist" decode with the run's
shortlist (python -m mt.shortlist); the others without it. For one thread, run under
OMP_NUM_THREADS=1:

    OMP_NUM_THREADS=1 python bench/decode.py --model runs/fr_en_student --test newstest:newstest2013 \
        --limit 1000 --engines "mt fp32,mt int8,mt int8 + shortlist,CTranslate2 int8,CTranslate2 int8 + shortlist"
 The test set is the run's first (`--test` names another); it
needs the corpus (downloaded, or MT_DATA_MIRROR).
On a GPU (`--device cuda`) the default row is mt at its inference precision (bf16 autocast); name
CTranslate2's rows with `--engines` where its CUDA build runs. The `transformers fp32` row, for runs
made by `mt.import`, is `MarianMTModel.generate` on the model the run was imported from (the same
weights), one batch at a time, since it has no workers.
"""

import argparse
import functools
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch
import yaml

from mt.checkpoint import BEST, load_checkpoint
from mt.config import read_run_config
from mt.cpu import allocator
from mt.data.corpora import columns, load_pairs
from mt.data.tokenizer import load_tokenizer
from mt.decode_options import DecodeOptions
from mt.errors import UserError, cli_entry, require_extra
from mt.hardware import describe
from mt.inference.ctranslate2_engine import CTranslate2Translator, export
from mt.inference.translator import Translator


def timed(translator, src, options, batch_size, repeat):
    best, hyp = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        hyp = translator.translate(src, options, batch_size=batch_size)
        best = min(best, time.perf_counter() - start)
    return best, hyp


# The last row is CTranslate2 as its own defaults lay it out (inter_threads 1): one batch at a time on every thread.
# No commas in the names: --engines splits on them.
ENGINES = ["mt fp32", "mt int8", "mt int8 (processes)", "CTranslate2 int8", "CTranslate2 int8 (1 worker)"]
# Rows of the same engines with the run's shortlist (python -m mt.shortlist); every other row decodes without it.
SHORTLIST_ENGINES = ["mt fp32 + shortlist", "mt int8 + shortlist", "CTranslate2 int8 + shortlist"]
IMPORTED_ONLY = ["transformers fp32"]  # rows named with --engines only: for runs imported from a MarianMT model
GPU_ENGINES = ["mt", "CTranslate2 float16", "CTranslate2 int8_float16"]  # mt: bf16 autocast, as mt.translate runs
PEER = "CTranslate2 int8"  # the row the ratios are taken against, where it ran


class TransformersMarian:
    """`transformers`' MarianMTModel.generate behind mt's `translate` call: length-sorted batches,
    one at a time, greedy or beam search as asked (with transformers' own length penalty)."""

    def __init__(self, run: str, device: str):
        transformers = require_extra("transformers", "import", "the transformers fp32 row")
        source = load_checkpoint(Path(run) / BEST).get("imported_from")
        if source is None:  # trained or fine-tuned here: transformers has no copy of these weights
            raise UserError(f"{run}/{BEST} was not made by mt.import: the transformers fp32 row is for imported models")
        try:
            self.tokenizer = transformers.MarianTokenizer.from_pretrained(source)
            model = transformers.MarianMTModel.from_pretrained(source, dtype=torch.float32)  # not the saved dtype
            self.model = model.eval().to(device)
        except OSError as e:
            raise UserError(f"cannot load {source}, which {run} was imported from: {str(e).splitlines()[0]}") from None

    def translate(self, src: list[str], options: DecodeOptions, batch_size: int) -> list[str]:
        order = sorted(range(len(src)), key=lambda i: len(src[i]))
        out = [""] * len(src)
        # mt's max_len leaves out </s>; transformers counts it (OPUS-MT checkpoints force it at the limit)
        limit = {"max_new_tokens": options.max_len + 1} if options.max_len else {}
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                rows = order[start : start + batch_size]
                batch = self.tokenizer([src[i] for i in rows], return_tensors="pt", padding=True).to(self.model.device)
                ids = self.model.generate(**batch, num_beams=options.beam, do_sample=False, **limit)
                for i, text in zip(rows, self.tokenizer.batch_decode(ids, skip_special_tokens=True)):
                    out[i] = text
        return out


def load_engine(name: str, model: str, tmp: Path, workers: int, device: str):
    if name == "transformers fp32":
        return TransformersMarian(model, device)
    if name.startswith("CTranslate2"):
        quantization = name.split()[1]
        export(model, tmp / quantization, quantization)
        return CTranslate2Translator(tmp / quantization, device, workers=1 if name.endswith("(1 worker)") else workers)
    translator = Translator.load(model, device, "int8" if name.startswith("mt int8") else None)
    if name.endswith("(processes)"):  # started before the clock, as CTranslate2's replicas are loaded
        translator.start_processes(workers)
    translator.translate = functools.partial(translator.translate, workers=workers)
    return translator


def corpus_spec(text: str):
    """--test as a recipe would hold it: YAML, so a mapping spec works on the command line too."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def first_test_set(cfg):
    test = cfg.data.test
    if isinstance(test, list):
        test = test[0] if test else None
    if not test:
        raise UserError("the run's recipe names no data.test set; pass --test SPEC")
    return test


def engine_rows(args) -> list[dict]:
    """Greedy and beam-5 rows of one engine on one run, `args.run` (this process runs no other:
    CTranslate2's thread pool and PyTorch's slowed each other by up to a quarter when they shared a
    2-core machine's process). Every run decodes the first run's test set."""
    cfg = read_run_config(Path(args.run) / "config.yaml")  # the recipe only: the engine loads below
    args.test = args.test or first_test_set(read_run_config(Path(args.model[0]) / "config.yaml"))
    src, ref = columns(load_pairs(args.test, "test", cfg.data.src_lang, cfg.data.tgt_lang), "src", "tgt")
    src, ref = src[: args.limit], ref[: args.limit]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        translator = load_engine(args.engine, args.run, Path(tmp), args.workers, args.device)
        ct2 = args.engine.startswith("CTranslate2")
        shortlist = args.engine.endswith("+ shortlist")
        if shortlist and not (translator.vmap if ct2 else translator.shortlist is not None):
            make = f"python -m mt.shortlist {args.run}"
            raise UserError(f"{args.run} has no shortlist for the '{args.engine}' row; make one: {make}")
        source_tokens = sum(len(ids) for ids in load_tokenizer(Path(args.run)).encode_batch(src))
        for beam in (1, 5):
            options = DecodeOptions(
                beam=beam, length_penalty=cfg.decode.length_penalty, max_len=args.max_len, shortlist=shortlist
            )
            seconds, hyp = timed(translator, src, options, args.batch_size, args.repeat)
            bleu = round(sacrebleu.corpus_bleu(hyp, [ref]).score, 2)
            rows.append({"model": args.run, "engine": args.engine, "decoding": options.name})
            rows[-1] |= {"seconds": round(seconds, 4), "bleu": bleu, "sentences": len(src), "test": args.test}
            rows[-1]["output_words"] = sum(len(h.split()) for h in hyp)
            rows[-1]["source_tokens"] = source_tokens  # the run's own pieces, whatever the engine's tokenizer
            rows[-1]["allocator"] = allocator.active()
            print(f"{args.engine:<27} {options.name:<7} {seconds:7.2f} s", file=sys.stderr)
        # the weights as stored: CTranslate2's export (with its vmap), or mt's checkpoint
        disk_mb = round(disk_bytes(Path(tmp) / args.engine.split()[1] if ct2 else Path(args.run) / BEST) / 2**20, 1)
    for row in rows:  # and the process's peak memory, over both beams
        row |= {"peak_rss_mb": round(peak_rss_bytes() / 2**20), "disk_mb": disk_mb}
    return rows


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports kilobytes


def disk_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def fastest_rounds(args) -> list[dict]:
    """Every run's and engine's rows, `args.rounds` times in turn, each in a fresh process; per row
    the fastest round, with all rounds' seconds beside it."""
    best: dict[tuple, dict] = {}
    for _ in range(args.rounds):
        for run, name in ((run, name) for run in args.model for name in args.engines):
            argv = [sys.executable, __file__, *sys.argv[1:], "--engine", name, "--run", run]
            engine = subprocess.run(argv, stdout=subprocess.PIPE)
            if engine.returncode:  # its one-line error is already on stderr
                sys.exit(engine.returncode)
            for row in json.loads(engine.stdout):
                key = (row["model"], row["engine"], row["decoding"])
                rounds = best.get(key, {}).get("rounds", []) + [row["seconds"]]
                if key not in best or row["seconds"] < best[key]["seconds"]:
                    best[key] = row
                best[key]["rounds"] = rounds
    return list(best.values())


def paired_ratio(seconds: list[float], peer_seconds: list[float]) -> float:
    """The median over rounds of a row's time over the peer's in the same round. The engines of a
    round run within a minute of each other, so a slow stretch of a shared machine, which moves
    whole rounds by 10% or more, cancels out of each round's ratio; the fastest rounds of two rows
    may come from different stretches."""
    return round(statistics.median(s / p for s, p in zip(seconds, peer_seconds)), 2)


@cli_entry
def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument(
        "--model",
        nargs="+",
        default=["runs/fr_en"],
        help="one run, or several (a teacher, its student): the first holds the peer row",
    )
    p.add_argument(
        "--test",
        type=corpus_spec,
        help="a test set as a recipe's data.test names it: a catalog name or a YAML mapping such as "
        "'{path: text, data_files: {fr: F, en: E}}' (default: the run's first; for fr_en Multi30k test_2016_flickr)",
    )
    p.add_argument("--out", default="bench/results/decode.json")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeat", type=int, default=1, help="time each row this many times a round and keep the fastest")
    p.add_argument("--rounds", type=int, default=1, help="run every engine this many times, in turn; keep the fastest")
    p.add_argument("--workers", type=int, help="batches decoded at once (default: one per thread on a CPU, 1 on a GPU)")
    p.add_argument("--limit", type=int, help="only the first N sentences")
    p.add_argument("--max-len", type=int, help="at most this many output tokens (default: the engines' own limits)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument(
        "--engines",
        type=lambda text: text.split(","),
        help=f"comma-separated rows (default on a CPU: {','.join(ENGINES)}; on a GPU: mt; for an imported model also "
        "transformers fp32)",
    )
    known = ENGINES + SHORTLIST_ENGINES + GPU_ENGINES + IMPORTED_ONLY
    p.add_argument("--peer", choices=known, default=PEER, help=f"the first run's row times are taken against ({PEER})")
    p.add_argument("--engine", choices=known, help=argparse.SUPPRESS)  # one engine's rows, as JSON
    p.add_argument("--run", help=argparse.SUPPRESS)  # ... on this one run
    args = p.parse_args(argv)
    args.workers = args.workers or (torch.get_num_threads() if args.device == "cpu" else 1)
    args.engines = args.engines or (ENGINES if args.device == "cpu" else GPU_ENGINES[:1])
    unknown = set(args.engines) - set(known)
    if unknown:
        p.error(f"unknown engine(s) {sorted(unknown)}; choose from {known}")
    if args.engine:
        if args.engine.startswith("mt"):  # as mt.translate runs; CTranslate2 as its own users run it
            allocator.restart_script_on_tcmalloc()
        print(json.dumps(engine_rows(args)))
        return
    rows = fastest_rounds(args)
    src_count, args.test = rows[0]["sentences"], rows[0]["test"]
    for row in rows:
        row["sentences_per_s"] = round(src_count / row["seconds"], 1)
        row["source_tokens_per_s"] = round(row["source_tokens"] / row["seconds"])
        add_peer_ratios(row, rows, args.model[0], args.peer)
    hardware = describe(torch.device(args.device))
    print(
        f"\n{src_count} sentences of {args.test}, batch {args.batch_size}, {args.workers} worker(s), "
        f"best of {args.rounds} round(s), {hardware}; times against {args.peer} on {args.model[0]}"
    )
    print_rows(rows, several_runs=len(args.model) > 1)
    write_results(args, rows, src_count, hardware)


def add_peer_ratios(row: dict, rows: list[dict], peer_run: str, peer_engine: str) -> None:
    """The row's time over the peer row's (the peer engine on the first run, the same decoding):
    under 1 is faster. None where the peer did not run."""
    key = (peer_run, peer_engine, row["decoding"])
    peer = next((r for r in rows if (r["model"], r["engine"], r["decoding"]) == key), None)
    row["vs_peer"] = round(row["seconds"] / peer["seconds"], 2) if peer else None
    row["vs_peer_paired"] = paired_ratio(row["rounds"], peer["rounds"]) if peer else None


def print_rows(rows: list[dict], several_runs: bool) -> None:
    name = (lambda r: f"{Path(r['model']).name}: {r['engine']}") if several_runs else (lambda r: r["engine"])
    width = max(30, max(len(name(r)) for r in rows) + 2)
    head = f"{'engine':<{width}}{'decoding':<9}{'seconds':>9}{'sent/s':>9}{'src tok/s':>10}{'BLEU':>7}"
    print(head + f"{'x peer':>8}{'paired':>8}{'RSS MB':>8}{'disk MB':>9}  malloc")
    for r in rows:
        ratio, paired = (f"{x:.2f}" if x is not None else "n/a" for x in (r["vs_peer"], r["vs_peer_paired"]))
        line = f"{name(r):<{width}}{r['decoding']:<9}{r['seconds']:>9.2f}{r['sentences_per_s']:>9.1f}"
        line += f"{r['source_tokens_per_s']:>10,}{r['bleu']:>7.2f}"
        print(line + f"{ratio:>8}{paired:>8}{r['peak_rss_mb']:>8}{r['disk_mb']:>9}  {r['allocator']}")


def write_results(args, rows: list[dict], src_count: int, hardware: str) -> None:
    try:
        import ctranslate2

        ct2_version = ctranslate2.__version__
    except ImportError:  # mt's rows alone need no CTranslate2
        ct2_version = None
    keys = ("model", "test", "batch_size", "workers", "rounds", "device", "max_len", "peer")
    summary = {key: getattr(args, key) for key in keys} | {"sentences": src_count, "hardware": hardware}
    summary |= {"torch": torch.__version__, "ctranslate2": ct2_version, "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
