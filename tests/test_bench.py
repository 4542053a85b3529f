"""The benchmark entry point runs in its quick mode and reports every row; timings are never asserted."""

import json
import subprocess
import sys


def test_bench_quick_prints_table_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, "-m", "mt.bench", "--quick", "--device", "cpu", "--out", str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "char GPT" in result.stdout and "translation Transformer" in result.stdout
    data = json.loads(out.read_text())
    assert [r["model"] for r in data["training"]] == ["char GPT", "translation Transformer"]
    assert all(r["tokens_per_s"] > 0 and r["mfu"] is None for r in data["training"])  # no known peak on CPU
    assert {(r["decoding"], r["kv_cache"]) for r in data["decoding"]} == {
        ("greedy", True), ("greedy", False), ("beam5", True), ("beam5", False)}
    outputs = {r["decoding"]: r["mean_output_tokens"] for r in data["decoding"] if r["kv_cache"]}
    uncached = {r["decoding"]: r["mean_output_tokens"] for r in data["decoding"] if not r["kv_cache"]}
    assert outputs == uncached  # the same outputs with and without the cache
