"""Smoke test of the benchmark machinery (benchmarks/) on a tiny size.

Runs all six measurements once, through the same Python API the command uses, and checks the
results document's shape and that its numbers are sane. No timing assertions: timings belong
in benchmarks/results.json, not in tests.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.common import SIZES, interleaved, paired_ratios, parse_sizes  # noqa: E402
from benchmarks.run import MEASUREMENTS, run_benchmarks, table  # noqa: E402


def positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def doc(tmp_path_factory, qapp):
    out = tmp_path_factory.mktemp("bench") / "results.json"
    run_benchmarks(
        [SIZES["tiny"]], MEASUREMENTS, quick=True, repeats=1, warmup=0, gui_samples=2, storm=(20, 0.2),
        export={"heads": 2, "seq": 16, "width": 32, "matplotlib": False}, export_repeats=1,
        out=out, print_table=False,
    )
    return json.loads(out.read_text())  # what was written, not just what was returned


def test_document_has_machine_info_and_every_measurement(doc):
    assert doc["schema"] == "attnviz-benchmarks/1"
    machine = doc["machine"]
    for key in ("cpu_model", "cpu_count", "torch_version", "date", "torch_threads"):
        assert machine[key], key
    assert doc["sizes"]["tiny"]["weights_bytes"] == 2 * 16 * 16 * 4
    for m in ("engine", "latency", "responsiveness", "memory", "view_only"):
        entry = doc[m]["tiny"]
        assert entry["status"] == "ok", (m, entry.get("reason"), entry.get("traceback"))
    assert doc["export"]["status"] == "ok", doc["export"].get("reason")
    assert isinstance(doc["checks"], list)


def test_engine_numbers(doc):
    e = doc["engine"]["tiny"]
    for name in ("seed_forward", "traced_forward", "run", "seed_script"):
        assert positive(e["median_s"][name]), name
    assert positive(e["ratio_traced_vs_seed"])
    assert e["parity_max_abs_diff"] < 1e-5  # same weights, same input: same output


def test_window_numbers(doc):
    lat = doc["latency"]["tiny"]
    assert positive(lat["p50_s"])
    seed = lat["seed_toggle"]
    assert seed["all_tiles_ok"] and seed["all_recomputed"]
    assert positive(seed["paint_s"]["p50"]) and positive(seed["worker_s"]["p50"])
    assert positive(lat["heads_toggle"]["to_full"]["latency_s"]["p50"])

    storm = doc["responsiveness"]["tiny"]
    assert storm["changes"] == 20 and storm["frames_shown"] >= 1
    assert storm["stale_frames_shown"] == 0
    assert storm["final_matches_parameters"] is True
    assert storm["longest_stall_s"] >= 0 and storm["storm_and_settle"]["ticks"] > 0

    view = doc["view_only"]["tiny"]
    assert view["recomputes"] == 0
    for name in ("colormap", "per_head_scale", "batch_item"):
        assert positive(view[name]["to_sigshown_s"]["p50"]), name


def test_memory_and_export_numbers(doc):
    mem = doc["memory"]["tiny"]
    assert positive(mem["peak_rss_bytes"]) and mem["peak_rss_bytes"] >= mem["peak_after_imports_bytes"]
    assert mem["budget_bytes"] == int(2.5 * mem["weights_bytes"] + 400e6)
    exp = doc["export"]
    assert positive(exp["median_s"]["attnviz_render"])
    assert exp["png_pixels"]["attnviz_render"][0] > 0


def test_table_prints_every_measurement(doc):
    text = table(doc)
    for label in ("1 engine", "2 latency", "3 storm", "4 export", "5 memory", "6 view-only"):
        assert label in text


def test_helpers():
    assert [s.name for s in parse_sizes("s, M")] == ["S", "M"]
    times = interleaved({"a": lambda: 1, "b": lambda: 2}, repeats=3, warmup=1)
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3}
    assert paired_ratios([2.0, 4.0], [1.0, 2.0]) == [2.0, 2.0]


def test_the_fuzz_compares_only_the_fields_that_apply():
    """A model-backed run takes its shapes from the model: hidden panel fields do not make it stale."""
    from attnviz.core import RunConfig
    from benchmarks.fuzz import shows_config

    toy = RunConfig(variant="toy-sort")
    assert shows_config(toy.replace(d_model=64, seq_q=8, seq_kv=8), toy.replace(d_model=8, seq_q=4, seq_kv=352))
    assert not shows_config(toy.replace(layer=1), toy)
    plain = RunConfig()
    assert not plain.applies("window") and shows_config(plain.replace(window=50), plain)  # causal: no window
    assert not shows_config(plain.replace(seed=plain.seed + 1), plain)


@pytest.mark.parametrize("name, key", [("heads", "head_effects"), ("generation", "generation"),
                                       ("patching", "patch_heads")])
def test_what_heads_do_and_generation_benchmarks_run_on_a_tiny_model(tmp_path, name, key):
    import importlib

    pytest.importorskip("transformers")
    module = importlib.import_module(f"benchmarks.{name}")
    out = tmp_path / f"{name}.json"
    assert module.main(["--tiny", "--output", str(out)]) == 0
    entry = json.loads(out.read_text())[key]
    assert positive(entry["ratio"]) and isinstance(entry["pass"], bool)
    assert entry["target"] in (1.2, 0.9, 1.0)  # what heads do, generation, patching


def test_the_window_benchmarks_on_a_model_run_on_a_tiny_one(tmp_path):
    """benchmarks.vision drives the window through its delivery (as benchmarks.models' Window does)."""
    pytest.importorskip("transformers")
    from benchmarks import vision

    out = tmp_path / "vision.json"
    vision.main(["--tiny", "--out", str(out)])  # its exit code says whether the target was met
    entry = json.loads(out.read_text())
    assert positive(entry["edit_s"]["p50"]) and positive(entry["eager_s"]["p50"]) and isinstance(entry["pass"], bool)
