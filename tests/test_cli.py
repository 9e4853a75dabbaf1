"""The `attnviz` command: `render` headless (PNG / SVG / NPZ), exit codes, one-line errors, dispatch."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
import xml.etree.ElementTree as ET
from dataclasses import fields

import numpy as np
import pytest

import attnviz
from attnviz import colormaps
from attnviz.cli import main
from attnviz.core import RunConfig, load_preset, run
from attnviz.export import GAP

SVG = "{http://www.w3.org/2000/svg}"
SMALL = ["--d-model", "8", "--heads", "4", "--seq-q", "6"]
BARE = ["--no-title", "--no-colorbar", "--no-labels"]


@pytest.fixture(autouse=True)
def _qt(qapp):
    """A QApplication first (pytest-qt), so in-process renders never create a widget-less QGuiApplication."""
    return qapp


def attnviz_cmd(*args, env=None, cwd=None):
    """Run `python -m attnviz ...` as a user would, headless: no display variables at all."""
    base = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    return subprocess.run([sys.executable, "-m", "attnviz", *args], env={**base, **(env or {})}, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def png_pixels(path) -> np.ndarray:
    from PySide6.QtGui import QImage

    img = QImage(str(path))
    assert not img.isNull(), f"{path} does not decode"
    img = img.convertToFormat(QImage.Format.Format_RGBA8888)
    h, w = img.height(), img.width()
    raw = np.frombuffer(img.constBits(), np.uint8, count=h * img.bytesPerLine())
    # Copy while `img` lives: constBits() does not keep the QImage alive, so a view would read freed
    # memory once this returns (garbage pixels when the suite has churned the heap; a crash for
    # large images). This made the causal-grid test fail in the full suite and pass alone.
    return raw.reshape(h, img.bytesPerLine())[:, : w * 4].reshape(h, w, 4).copy()


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got:\n{err}"
    assert "Traceback" not in err
    return lines[0]


# --- as a subprocess (the real entry point, headless) ---------------------------------------


def test_preset_npz_is_exactly_the_core_output(tmp_path):
    out = attnviz_cmd("render", "--preset", "seed000-demo", "-o", "demo.npz", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    expected = run(load_preset("seed000-demo"))
    with np.load(tmp_path / "demo.npz") as data:
        np.testing.assert_array_equal(data["output"], expected.output)
        np.testing.assert_array_equal(data["dropped"], expected.dropped)
        assert RunConfig.from_json(str(data["config"])) == load_preset("seed000-demo")


def test_headless_png_single_head_is_exactly_the_scaled_map(tmp_path):
    out = attnviz_cmd("render", *SMALL, "--head", "1", "--scale", "4", *BARE, "-o", str(tmp_path / "h.png"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"wrote {tmp_path / 'h.png'}"
    px = png_pixels(tmp_path / "h.png")
    assert px.shape[:2] == (6 * 4, 6 * 4)  # (Lq*s, Lkv*s)


def test_render_picks_offscreen_itself_and_never_imports_widgets(tmp_path):
    argv = ["render", "--d-model", "8", "--heads", "2", "--seq-q", "4", "-o", str(tmp_path / "x.svg")]
    code = ("import sys; from attnviz.cli import main; from PySide6.QtGui import QGuiApplication; "
            f"rc = main({argv!r}); "
            "print(rc, QGuiApplication.platformName(), 'PySide6.QtWidgets' in sys.modules, 'pyqtgraph' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-4:] == ["0", "offscreen", "False", "False"]
    assert (tmp_path / "x.svg").stat().st_size > 0


def test_version():
    out = attnviz_cmd("--version")
    assert out.returncode == 0
    assert out.stdout.strip() == f"attnviz {attnviz.__version__}"


def test_bad_argument_in_a_subprocess_is_one_line_exit_2(tmp_path):
    out = attnviz_cmd("render", "--variant", "nonsense", "-o", str(tmp_path / "x.png"))
    assert out.returncode == 2
    assert "invalid choice: 'nonsense'" in one_error_line(out.stderr)
    assert list(tmp_path.iterdir()) == []


# --- in-process (faster) ---------------------------------------------------------------------


def test_causal_grid_tiles_mask_the_strict_upper_triangle(tmp_path, capsys):
    s = 5
    assert main(["render", *SMALL, "--mask", "causal", "--scale", str(s), *BARE, "-o", str(tmp_path / "g.png")]) == 0
    px = png_pixels(tmp_path / "g.png")
    tile = 6 * s
    assert px.shape[:2] == (2 * tile + GAP, 2 * tile + GAP)  # 4 heads: a 2 x 2 grid
    masked = colormaps.lut(colormaps.DEFAULT_SEQUENTIAL)[colormaps.MASKED_INDEX, :3]
    upper = np.triu(np.ones((6, 6), bool), 1)
    for row in range(2):
        for col in range(2):
            x0, y0 = col * (tile + GAP), row * (tile + GAP)
            centres = px[y0 + s // 2 : y0 + tile : s, x0 + s // 2 : x0 + tile : s, :3]
            assert centres.shape == (6, 6, 3)
            assert (centres[upper] == masked).all()
            assert not (centres[~upper] == masked).all(-1).any()


def test_svg_has_one_image_per_head_and_the_title(tmp_path):
    path = tmp_path / "grid.svg"
    assert main(["render", *SMALL, "--heads", "2", "-o", str(path)]) == 0
    root = ET.parse(path).getroot()
    assert len(root.findall(f".//{SVG}image")) == 2
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "Attention weights \u00b7 2 heads" in texts
    assert any("Causal self-attention" in t for t in texts)


def test_npz_round_trips_to_run_config(tmp_path):
    path = tmp_path / "r.npz"
    args = ["--variant", "cross", "--d-model", "6", "--d-out", "8", "--heads", "2", "--seq-q", "3",
            "--seq-kv", "5", "--batch", "2", "--mask", "padding", "--kv-lengths", "5,2", "--seed", "7"]
    assert main(["render", *args, "-o", str(path)]) == 0
    config = RunConfig.for_variant("cross", d_model=6, d_out=8, heads=2, seq_q=3, seq_kv=5, batch=2,
                                   mask="padding", kv_lengths=(5, 2), seed=7)
    expected = run(config)
    with np.load(path) as data:
        assert RunConfig.from_json(str(data["config"])) == config
        for name in ("weights", "scores", "output", "q", "k", "v", "context", "mask", "dropped",
                     "fully_masked_rows"):
            np.testing.assert_array_equal(data[name], getattr(expected, name), err_msg=name)


def test_flags_override_the_preset_and_the_config_file(tmp_path):
    assert main(["render", "--preset", "seed000-demo", "--heads", "4", "--no-train", "-o",
                 str(tmp_path / "p.npz")]) == 0
    with np.load(tmp_path / "p.npz") as data:
        got = RunConfig.from_json(str(data["config"]))
    assert got == load_preset("seed000-demo").replace(heads=4, train=False)

    saved = tmp_path / "saved.json"
    saved.write_text(RunConfig(d_model=8, heads=2, seq_q=4, seed=5).to_json(), encoding="utf-8")
    assert main(["render", "--config", str(saved), "--seq-q", "3", "-o", str(tmp_path / "c.npz")]) == 0
    with np.load(tmp_path / "c.npz") as data:
        assert RunConfig.from_json(str(data["config"])) == RunConfig(d_model=8, heads=2, seq_q=3, seed=5)


def test_every_config_field_has_a_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        from attnviz.cli_flags import render_parser

        render_parser().parse_args(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for f in fields(RunConfig):
        assert "--" + f.name.replace("_", "-") in text, f.name


BAD = {
    "unknown variant": (["--variant", "nonsense"], "invalid choice"),
    "heads not dividing": (["--d-model", "8", "--heads", "3"], "3 heads do not divide"),
    "kv length too long": (["--variant", "cross", "--seq-kv", "4", "--mask", "padding", "--kv-lengths", "9"],
                           "length 9 is outside the key sequence"),
    "bad lengths": (["--mask", "padding", "--kv-lengths", "a,b"], "invalid lengths 'a,b'"),
    "head out of range": ([*SMALL, "--head", "4"], "head 4 does not exist"),
    "head and mean": ([*SMALL, "--head", "1", "--mean"], "--head and --mean"),
    "bad scale": ([*SMALL, "--scale", "0"], "--scale 0"),
    "preset and config": (["--preset", "default", "--config", "x.json"], "not allowed with"),
    "unknown preset": (["--preset", "nope"], "no such preset"),
    "batch index": ([*SMALL, "--batch-index", "1"], "batch index 1 does not exist"),
    "not a number": (["--heads", "four"], "invalid int value"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments_exit_2_with_one_line_and_write_nothing(name, tmp_path, capsys):
    args, message = BAD[name]
    assert main(["render", *args, "-o", str(tmp_path / "out.png")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("attnviz render: error: ") and message in line
    assert list(tmp_path.iterdir()) == []


def test_bad_extension_exits_2(tmp_path, capsys):
    assert main(["render", *SMALL, "-o", str(tmp_path / "out.jpg")]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "'.jpg'" in line and ".png, .svg, .npz" in line
    assert list(tmp_path.iterdir()) == []


def test_missing_output_exits_2(capsys):
    assert main(["render", *SMALL]) == 2
    assert "-o FILE" in one_error_line(capsys.readouterr().err)


def test_existing_file_survives_a_failed_export(tmp_path, capsys, monkeypatch):
    target = tmp_path / "keep.png"
    target.write_bytes(b"the previous export")

    def fail(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fail)
    assert main(["render", *SMALL, "-o", str(target)]) == 1
    assert "input/output error" in one_error_line(capsys.readouterr().err)
    assert target.read_bytes() == b"the previous export"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.png"]


def test_view_options_reach_the_export(tmp_path, monkeypatch):
    seen = {}

    def fake_export(result, path, options):
        seen.update(path=path, options=options, config=result.config)
        return path

    monkeypatch.setattr("attnviz.export.export", fake_export)
    argv = ["render", *SMALL, "--view", "scores", "--mean", "--colormap", "coolwarm", "--scale", "3",
            "--no-colorbar", "--batch-index", "0", "--per-head-scale", "-o", str(tmp_path / "m.svg")]
    assert main(argv) == 0
    o = seen["options"]
    assert (o.what, o.view, o.diverging, o.scale, o.colorbar, o.title, o.shared_scale) == (
        "mean", "scores", "coolwarm", 3, False, True, False)
    assert seen["config"] == RunConfig(d_model=8, heads=4, seq_q=6)


def test_no_subcommand_starts_the_app_with_the_rest_of_argv(monkeypatch):
    calls = []
    fake = types.ModuleType("attnviz.ui.window.app")
    fake.run_app = lambda argv, open_path=None: calls.append((argv, open_path)) or 0
    monkeypatch.setitem(sys.modules, "attnviz.ui.window.app", fake)
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert main(["-style", "fusion"]) == 0
    assert main([]) == 0
    assert calls == [(["-style", "fusion"], None), ([], None)]


def test_a_path_opens_the_app_on_it_and_a_missing_one_is_refused(monkeypatch, tmp_path, capsys):
    calls = []
    fake = types.ModuleType("attnviz.ui.window.app")
    fake.run_app = lambda argv, open_path=None: calls.append((argv, open_path)) or 0
    monkeypatch.setitem(sys.modules, "attnviz.ui.window.app", fake)
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    maps = tmp_path / "maps.npz"
    maps.write_bytes(b"")
    assert main([str(maps), "-style", "fusion"]) == 0
    assert calls == [(["-style", "fusion"], str(maps))]
    assert main([str(tmp_path / "missing.gguf")]) == 2
    err = capsys.readouterr().err
    assert "missing.gguf: no such file or folder" in err and "Fix:" in err
    assert len(calls) == 1  # the app never started on it


def test_no_display_for_the_app_is_one_line(monkeypatch, capsys):
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    assert main([]) == 1
    assert "no display" in one_error_line(capsys.readouterr().err)


def test_list_presets_and_help(capsys):
    from attnviz.core import RunConfig, load_preset
    from attnviz.ui.window.settings import START_PRESET

    assert main(["render", "--list-presets"]) == 0
    out = capsys.readouterr().out
    assert "seed000-demo" in out
    opens = [line for line in out.splitlines() if "what attnviz opens with" in line]
    assert len(opens) == 1 and opens[0].split()[0] == START_PRESET, opens  # said of the preset it opens on only
    default = next(line for line in out.splitlines() if line.split()[0] == "default")
    assert "the defaults" in default and load_preset("default") == RunConfig()  # as Reset and bare flags have it
    assert main(["--help"]) == 0
    assert "attnviz render" in capsys.readouterr().out


def test_a_scale_too_large_for_one_image_is_a_bad_argument(tmp_path, capsys):
    out = tmp_path / "huge.png"
    assert main(["render", *SMALL, "--scale", "100000", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pixels, over the limit" in err[0]
    assert not out.exists()


def test_png_pixels_owns_its_memory(tmp_path):
    """The helper's array must outlive the QImage it was read from (see png_pixels)."""
    assert main(["render", *SMALL, "--scale", "2", *BARE, "-o", str(tmp_path / "p.png")]) == 0
    px = png_pixels(tmp_path / "p.png")
    assert px.flags.owndata and px.flags.c_contiguous


def test_holding_ctrl_c_through_the_imports_leaves_an_ignored_sigint_ignored():
    import signal

    from attnviz.cli import _interrupt_after

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # e.g. `attnviz render ... &` in a script
    try:
        with _interrupt_after():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # nothing raised, nothing replaced
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with pytest.raises(KeyboardInterrupt), _interrupt_after():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)  # Python runs the held handler here; the interrupt comes at the end
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_readme_names_every_render_flag():
    """The README's option list stays complete: each flag the parser has is named there."""
    from pathlib import Path

    from attnviz.cli_flags import render_parser

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    flags = [s for a in render_parser()._actions for s in a.option_strings if s.startswith("--")]
    assert [f for f in flags if f not in readme] == []


def test_the_readme_option_list_is_the_parser_s_own():
    """The README's option list is generated from the parser (python -m attnviz.cli_flags): regenerate it
    when a flag or its help changes."""
    from pathlib import Path

    from attnviz.cli_flags import options_markdown

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- render options: generated by python -m attnviz.cli_flags -->\n")
    block = readme[readme.index("\n", start) + 1:readme.index("<!-- end of render options -->")]
    assert block == options_markdown()
    assert "`--view {" in block and "`--region Q0:Q1,K0:K1`" in block


def test_text_and_path_flags_say_what_they_take():
    from attnviz.cli_flags import render_parser

    usage = render_parser().format_help()
    for flag in ("--text TEXT", "--decoder-text TEXT", "--model DIR_OR_GGUF", "--image FILE", "--maps FILE.npz"):
        assert flag in usage, flag
    assert "--text NAME" not in usage and "--model NAME" not in usage
