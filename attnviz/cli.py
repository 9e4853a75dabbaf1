"""The `attnviz` command: the GUI by default, `attnviz render` for headless export.

    attnviz                      open the app (arguments go to Qt)
    attnviz PATH                 open the app on a model folder, .gguf, .json or .npz
    attnviz --install-desktop    the application menu entry (Linux)
    attnviz --version
    attnviz render -o maps.png [--preset NAME | --config FILE.json] [config flags] [view flags]
    attnviz render --model DIR --text "..." --layer N [--head H] [--view ...] -o out.png|svg|npz [--all-layers]

The config flags are generated from the RunConfig fields and their metadata (cli_flags.py: one flag per
field, help text from the tooltip, range from minimum/maximum). Precedence: defaults < --preset or
--config < explicit flags. Exit status: 0 written; 2 bad argument or invalid configuration
(nothing written); 1 any other failure (e.g. the output cannot be written). Errors are one line
on stderr, no traceback (set ATTNVIZ_DEBUG=1 to see one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from dataclasses import fields

from attnviz import __version__
from attnviz.cli_flags import RENDER_PROG, UsageError, flag_of, render_parser, stage_names, text_file
from attnviz.system import catch_native_stderr, no_display

PROG = "attnviz"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
def _build_config(args: argparse.Namespace):
    from attnviz.core import RunConfig, load_preset

    names = {f.name for f in fields(RunConfig)}
    flags = {k: v for k, v in vars(args).items() if k in names}
    if args.text_file:
        if "text" in flags:
            raise UsageError("give the text with --text or --text-file, not both")
        flags["text"] = text_file(args.text_file)
    if args.region and "pool" not in flags:
        flags["pool"] = "always"  # the block is kept from the pooled path's blocks
    if args.preset or args.config:  # the flags on top of it must apply to it, as bare flags must
        base = load_preset(args.preset) if args.preset else _load_config_flag(args.config)
        config = base.replace(**flags) if flags else base
        _refuse_ignored(config, flags, f"--preset {args.preset}" if args.preset else f"--config {args.config}")
        return config
    if "model" in flags and "variant" not in flags:  # --model DIR: a pretrained model's attention
        flags["variant"] = "pretrained"
    if "maps" in flags and "variant" not in flags:  # --maps FILE.npz: the maps as saved, at the file's layer
        from attnviz.core.runs.config import MAPS_SUFFIX
        from attnviz.core.runs.saved import MAPS_VARIANT, saved_layer

        flags["variant"] = MAPS_VARIANT
        if str(flags["maps"]).lower().endswith(MAPS_SUFFIX):  # else the configuration says what is wrong
            flags.setdefault("layer", saved_layer(flags["maps"]))
    # the variant's own defaults (its seed's mask and biases), then the flags
    config = RunConfig.for_variant(flags.pop("variant"), **flags) if "variant" in flags else RunConfig(**flags)
    _refuse_ignored(config, flags)
    return config


def _load_config_flag(path: str):
    from attnviz.core import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:  # name the flag and the file; the file's contents are never quoted
        text = f"{exc.problem}. Fix: {exc.fix}" if exc.field == "file" else str(exc)
        raise UsageError(f"--config {path}: {text}") from None


def _refuse_ignored(config, flags: dict, source: str = "") -> None:
    """A flag given on the command line that this variant, mask or position does not use would be
    silently ignored (yet saved in the config): say so instead."""
    ignored = [name for name in flags if not config.applies(name)]
    if ignored:
        name = ignored[0]
        given = f" of {source}" if source else ""
        raise UsageError(f"{flag_of(name)} does not apply to variant {config.variant}{given} (mask {config.mask}, "
                         f"position {config.position}): drop it, or choose a variant, mask or position that uses it")


def _check_files_apply(config) -> None:
    """--weights / --inputs load into the seed variants only; elsewhere say so rather than ignore them."""
    from attnviz.core.runs.config import FILE_FIELDS

    for name in FILE_FIELDS:
        if getattr(config, name) and not config.applies(name):
            raise UsageError(f"{flag_of(name)} loads into the seed variants (causal, self, cross, cross-context, "
                             f"differential), not into {config.variant}")


def _export_options(args: argparse.Namespace):
    from attnviz import colormaps
    from attnviz.export import ExportOptions

    if args.head is not None and args.mean:
        raise UsageError("--head and --mean exclude each other: give one")
    if args.view == "pipeline" and args.mean:
        raise UsageError("--view pipeline shows one head: use --head N, not --mean")
    if args.rollout and (args.view in ("pipeline", "output") or args.head is not None or args.mean):
        raise UsageError("--rollout draws one map over all layers and heads: drop --view pipeline/output, "
                         "--head and --mean")
    if args.view == "output" and (args.head is not None or args.mean):
        raise UsageError("--view output draws the whole output tensor; drop --head / --mean")
    if args.scale is not None and args.scale < 1:
        raise UsageError(f"--scale {args.scale}: give 1 or more pixels per cell")
    if args.view == "output":
        what, view = "output", "weights"
    elif args.view == "pipeline":
        what, view = "head", "weights"
    elif args.rollout:
        what, view = "rollout", "weights"
    else:
        what, view = ("head" if args.head is not None else "mean" if args.mean else "grid"), args.view
    kw = {}
    if args.colormap:
        kw["colormap" if args.view in ("weights", "pipeline") else "diverging"] = args.colormap
    return ExportOptions(
        what=what, view=view, head=args.head or 0, scale=args.scale, title=not args.no_title,
        colorbar=not args.no_colorbar, axis_labels=not args.no_labels, all_labels=args.all_labels,
        batch_index=args.batch_index,
        shared_scale=not args.per_head_scale, colormap=kw.get("colormap", colormaps.DEFAULT_SEQUENTIAL),
        diverging=kw.get("diverging", colormaps.DEFAULT_DIVERGING), scale_mode=args.scale_mode,
        all_layers=args.all_layers, step=args.step,
    )


def render_main(argv: list[str]) -> int:
    """`attnviz render`: parse, validate (exit 2), run, export (exit 1 on failure)."""
    from attnviz.atomic import BadPath, ExportError
    from attnviz.core import ConfigError

    args = None
    try:
        args = render_parser().parse_args(argv)
        if args.list_presets:
            from attnviz.core import list_presets

            for name, text in list_presets().items():
                print(f"{name:28} {text}")
            return EXIT_OK
        config, options, record = _plan_render(args)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except (UsageError, ConfigError, ValueError, BadPath) as exc:
        return _fail(EXIT_USAGE, f"{RENDER_PROG}: error: {_by_flag(exc, args)}")
    except ExportError as exc:  # a read-only target (never replaced from the command line), an unwritable folder
        return _fail(EXIT_FAILURE, f"{RENDER_PROG}: error: {exc}")
    return _render_planned(args, config, options, record)


def _by_flag(exc: Exception, args: argparse.Namespace | None) -> str:
    """The message, naming the flag (--dropout nan: ...) when the value at fault was given as one."""
    from attnviz.core import ConfigError

    if isinstance(exc, ConfigError) and args is not None and exc.field in vars(args):
        value = exc.value
        typed = (value if isinstance(value, str) else ",".join(map(str, value)) if isinstance(value, tuple)
                 else str(value))  # as it was typed: cuda, 16,9
        return exc.describe(f"{flag_of(exc.field)} {typed if len(typed) <= 80 else exc.shown}")
    return str(exc)


def _plan_render(args: argparse.Namespace) -> tuple:
    """Everything checkable before any compute: the config, the export options, the stages to
    record, and the targets (a missing or unwritable folder, a read-only file). Raises what
    render_main reports."""
    tables = {"--stats": args.stats, "--predictions": args.predictions, "--head-scores": args.head_scores,
              "--patch-heads": args.patch_heads}
    if not args.output and not any(tables.values()):
        raise UsageError(f"give the file to write with -o FILE (see '{RENDER_PROG} --help')")
    if args.output:
        from attnviz.export import format_of

        format_of(args.output)  # an unknown extension is a usage error now, not after the run
    for flag, path in tables.items():
        if path and not path.lower().endswith(".csv"):
            raise UsageError(f"{flag} {path}: give a .csv file")
    config = _build_config(args)
    options = _export_options(args)
    if args.all_layers and not (config.spec.backed or config.spec.read):
        raise UsageError("--all-layers needs a multi-layer model: give --model DIR_OR_GGUF, a toy's --preset, or "
                         "--maps FILE.npz")
    npz_only = [flag for flag, given in (("--all-layers", args.all_layers), ("--stages", args.stages)) if given]
    if npz_only and args.output and not args.output.lower().endswith(".npz") and args.view != "pipeline":
        raise UsageError(f"{npz_only[0]} chooses the arrays an NPZ keeps; an image draws one view: write -o FILE.npz, "
                         f"or drop {npz_only[0]}")
    _check_files_apply(config)
    if not config.spec.backed:  # a model's heads and tokens are known only once it has run
        options.check(config)
    record = _record(config, options, args.stages)
    if args.view == "pipeline":
        from attnviz.core.kernel.stages import ALL_STAGES

        record = ALL_STAGES
    missing = [f for f, v in (("--corrupted-text", args.corrupted_text), ("--answer", args.answer),
                              ("--wrong", args.wrong)) if args.patch_heads and v is None]
    if missing:
        raise UsageError(f"--patch-heads needs {', '.join(missing)}: the corrupted text and the two answer tokens")
    if (args.predictions or args.head_scores) and not config.spec.backed:
        flag = "--predictions" if args.predictions else "--head-scores"
        raise UsageError(f"{flag} needs a model: a trained toy (--variant toy-induction) or --model DIR")
    _check_targets({"-o": args.output, **tables})
    return config, options, record


def _check_targets(targets: dict[str, str | None]) -> None:
    """Each file to write: writable, not a symbolic link (the command line never writes through one: a link
    left in the folder could send the file anywhere), and no two flags naming the same file."""
    from attnviz.atomic import BadPath, check_target

    seen: dict[str, str] = {}
    for flag, target in targets.items():
        if not target:
            continue
        if os.path.islink(target):
            raise UsageError(f"{flag} {target}: is a symbolic link (to {os.readlink(target)}); give the file's own "
                             "path, or remove the link")
        try:
            check_target(target)
        except BadPath as exc:  # a bad argument: named by its flag
            raise UsageError(f"{flag} {target}: {exc.reason}") from None
        key = os.path.normcase(os.path.realpath(target))
        if key in seen:
            raise UsageError(f"{seen[key]} and {flag} name the same file {target}: give each its own file")
        seen[key] = flag


def _render_planned(args: argparse.Namespace, config, options, record) -> int:
    """Run the checked plan and write its files; one clear line and an exit status on failure."""
    from attnviz.core import ConfigError
    from attnviz.core.runs.result import NonFiniteResult
    from attnviz.core.runs.runner import require_kept
    from attnviz.export import ExportError, ImageTooLarge, format_of
    from attnviz.frames import view_stage

    try:
        result = _run(config, record, args.truncate, args.region)
        stepped = _at_step(result, args.step)
        if config.spec.backed:
            options.check(result.config)  # --head against the model's heads
            if args.view not in ("pipeline", "output"):
                require_kept(result, view_stage(options.map_view))  # e.g. scores of a weights-only family
        if args.rollout and (result.layer_weights is None or result.layer_weights.shape[0] < 2):
            return _fail(EXIT_USAGE, f"{RENDER_PROG}: error: --rollout needs a multi-layer model; this run "
                                     f"({config.variant}) has one attention layer")
        if args.stats:
            _write_stats(stepped, args.stats, options.batch_index)
            print(f"wrote {args.stats}")
        _write_head_tables(stepped, args)
        if not args.output:
            return EXIT_OK
        ext = format_of(args.output)
        if ext != ".npz":
            from attnviz.export import ensure_gui_app

            ensure_gui_app()  # picks the offscreen platform when there is no display
        path = _write(result, stepped, args, options, ext)
    except UsageError as exc:
        return _fail(EXIT_USAGE, f"{RENDER_PROG}: error: {exc}")
    except (ConfigError, ValueError) as exc:  # found only when running: no CUDA, over the memory budget, a bad
        return _fail(EXIT_USAGE, f"{RENDER_PROG}: error: {_by_flag(exc, args)}")  # model or text, a missing head
    except ExportError as exc:  # a --scale too large for one image is a bad argument, the rest failures
        code = EXIT_USAGE if isinstance(exc.__cause__, ImageTooLarge) else EXIT_FAILURE
        return _fail(code, f"{RENDER_PROG}: error: {exc}")
    except KeyboardInterrupt:
        return _fail(130, f"{RENDER_PROG}: interrupted; nothing written")
    except NonFiniteResult as exc:  # a failure of the run, not of the arguments
        return _fail(EXIT_FAILURE, f"{RENDER_PROG}: error: {exc}")
    except Exception as exc:  # noqa: BLE001 - one clear line, not a traceback
        return _fail(EXIT_FAILURE, f"{RENDER_PROG}: error: {type(exc).__name__}: {exc}")
    print(f"wrote {path}")
    return EXIT_OK


def _at_step(result, step: int | None):
    """The generation as it stood after --step generated tokens (the tables and the pipeline figure read it); the
    run itself without --step. The maps go to export() whole, with the step in their options: an image then fades
    the later rows as the window's Step slider does, an NPZ holds them cut (the same path as the window's Export)."""
    if step is None:
        return result
    from attnviz.core.runs.generation import at_step

    if result.prompt_length is None:
        raise UsageError("--step needs --generate N (a model writing after the text)")
    return at_step(result, step)  # a step out of range: one clear line naming --step


def _write(result, stepped, args: argparse.Namespace, options, ext: str):
    """The -o file: the pipeline figure, the rollout, or the maps (export.export); `stepped`: the result at --step."""
    from attnviz.export import export, export_pipeline
    from attnviz.frames import ViewOptions

    if args.view == "pipeline":
        view = ViewOptions(batch_index=options.batch_index, colormap=options.colormap, diverging=options.diverging,
                           scale_mode=options.scale_mode)
        return export_pipeline(stepped, args.output, view, options.head)
    if args.rollout and ext == ".npz":
        import numpy as np

        from attnviz.core.analysis.stats import rollout
        from attnviz.export import write_npz

        return write_npz(stepped, args.output, rollout=rollout(stepped.layer_weights).astype(np.float32))
    return export(result, args.output, options)


def _write_stats(result, path: str, b: int) -> None:
    from attnviz.explain import stats_csv_for
    from attnviz.export.table import write_csv

    write_csv(path, stats_csv_for(result, b))


def _write_head_tables(result, args: argparse.Namespace) -> None:
    """--predictions and --head-scores: ConfigError where the model has no output head."""
    from attnviz.core import ConfigError
    from attnviz.core.analysis.heads import head_scores, head_scores_csv
    from attnviz.core.runs.predictions import predictions_csv
    from attnviz.export.table import write_csv

    if args.predictions:
        if result.predictions is None:
            raise ConfigError("predictions", args.predictions, f"{result.config.model or result.config.variant} has no "
                              "output head to predict with (an encoder without a language-model head, or the decoder "
                              "side of an encoder-decoder)", "leave out --predictions, or give a causal or masked LM")
        write_csv(args.predictions, predictions_csv(result))
        print(f"wrote {args.predictions}")
    if args.head_scores:
        write_csv(args.head_scores, head_scores_csv(head_scores(result.config)))
        print(f"wrote {args.head_scores}")
    if args.patch_heads:
        from attnviz.core.analysis.patching import patch_heads, patching_csv

        scores = patch_heads(result.config, args.corrupted_text, args.answer, args.wrong)
        write_csv(args.patch_heads, patching_csv(scores))
        print(f"wrote {args.patch_heads}")


def _run(config, record, truncate: bool, region=None):
    """The run of `config` through a sync session, as a script runs it: on this thread, with torch's threads as they
    are; with --truncate, a text too long for the model is cut to the fix the error offers."""
    from attnviz.core import ConfigError, run  # run looked up now: tests stand in for it
    from attnviz.session import Events, Failure, Request, Session
    from attnviz.session.lanes import caller_lanes
    from attnviz.session.threads import as_is

    heard: list = []  # no traceback for an unexpected exception: the CLI says it in one line
    session = Session(run, Events(done=heard.append, failed=heard.append, unexpected=heard.append),
                      lanes=caller_lanes, sync=True, threads=as_is)

    def ask(request_id: int, config):
        heard.clear()
        session.submit(Request(request_id, config, None, force=True, record=record, region=region))
        last = heard[-1]  # a sync session has reported the request's outcome or failure before submit returns
        if isinstance(last, Failure):
            raise last.error  # mapped to an exit status by _render_planned, as the run's own exception was
        return last.result

    try:
        return ask(1, config)
    except ConfigError as exc:
        if not (truncate and exc.field == "text" and exc.suggestions):
            raise
        print(f"{RENDER_PROG}: note: {exc.problem}; truncated", file=sys.stderr)
        return ask(2, config.replace(text=exc.suggestions[0]))
    finally:
        session.stop()


def _record(config, options, stages: tuple[str, ...] | None) -> frozenset[str]:
    """The stages the run keeps: the defaults, the drawn view's stage, and --stages (checked)."""
    from attnviz.core.kernel.stages import DEFAULT_RECORD
    from attnviz.core.runs.runner import require_stage, run_stages
    from attnviz.frames import view_stage

    view = view_stage(options.map_view)
    require_stage(config, view)
    extra = set(stages or ())
    if stages != stage_names():  # 'all' means all this run has; named stages must exist
        for name in extra:
            require_stage(config, name, "--stages")
    return frozenset(DEFAULT_RECORD | {view} | (extra & set(run_stages(config))))


def _fail(code: int, line: str) -> int:
    if os.environ.get("ATTNVIZ_DEBUG"):
        traceback.print_exc()
    line = " ".join(line.split()).encode("utf-8", "backslashreplace").decode("utf-8")  # an argument's stray bytes
    print(line, file=sys.stderr)  # (surrogates) written as \udcff, not an error of their own
    return code


TOP_HELP = f"""usage: {PROG} [--version] [-h] [--install-desktop] [PATH] [render ...] [Qt options]

See attention: a desktop app that runs hand-written attention modules and shows every head live.

  {PROG}                  open the app
  {PROG} PATH             open the app on PATH: a model folder, a .gguf file, a saved
                          configuration (.json) or exported maps (.npz)
  {PROG} --install-desktop  add attnviz to the application menu (Linux), opening .gguf and .npz
  {PROG} render -o FILE   run one configuration headless and write PNG, SVG or NPZ
                          ('{PROG} render --help' lists the options)
  {PROG} --version        print the version
"""


def main(argv: list[str] | None = None) -> int:
    """The `attnviz` command: the app, or `attnviz render`. Ctrl+C while it starts is one line, exit 130."""
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:  # the imports alone take seconds; the running app handles Ctrl+C itself
        return _fail(130, f"{PROG}: interrupted")


@contextlib.contextmanager
def _interrupt_after() -> Iterator[None]:
    """Hold Ctrl+C until the block ends, then raise KeyboardInterrupt. For importing torch and Qt
    (seconds): an interrupt raised inside torch's C++ import code aborts the process (exit 134)."""
    on_main = threading.current_thread() is threading.main_thread()
    if not on_main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # SIGINT ignored (a background job) or someone else's handler: leave it be
        return
    hits: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda *_: hits.append(1))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if hits:
        raise KeyboardInterrupt


def _dispatch(argv: list[str]) -> int:
    if argv[:1] == ["render"]:
        with _interrupt_after():
            import torch  # noqa: F401 - the engine's one heavy import (attnviz.core loads its names lazily)
        catch_native_stderr()  # one thread writes here: a tokenizer's panic leaves one line, ours
        return render_main(argv[1:])
    if argv[:1] == ["--version"]:
        print(f"{PROG} {__version__}")
        return EXIT_OK
    if argv[:1] in (["-h"], ["--help"]):
        print(TOP_HELP, end="")
        return EXIT_OK
    if argv[:1] == ["--install-desktop"]:
        return _install_desktop()
    path = argv[0] if argv and not argv[0].startswith("-") else None
    if path is not None and not os.path.exists(path):
        return _fail(EXIT_USAGE, f"{PROG}: error: {path}: no such file or folder. Fix: give a model folder, a .gguf "
                                 f"file, a saved configuration (.json) or exported maps (.npz)")
    if no_display():
        return _fail(EXIT_FAILURE, f"{PROG}: error: no display to open the app on (DISPLAY and WAYLAND_DISPLAY "
                                   f"are unset); use '{PROG} render' headless, or set QT_QPA_PLATFORM")
    try:
        with _interrupt_after():
            from attnviz.ui.window.app import run_app  # lazily: `attnviz render` never imports widgets
    except ImportError as exc:
        return _fail(EXIT_FAILURE, f"{PROG}: error: the app cannot start ({exc}); "
                                   f"'{PROG} render' still works without it")
    return run_app(argv[1:] if path else argv, open_path=path)


def _install_desktop() -> int:
    from attnviz.desktop import install

    try:
        written = install()
    except RuntimeError as exc:  # macOS, Windows: what to do instead
        print(f"{PROG}: {exc}")
        return EXIT_OK
    except OSError as exc:
        return _fail(EXIT_FAILURE, f"{PROG}: error: the menu entry cannot be written ({exc})")
    for path in written:
        print(f"wrote {path}")
    print(f"{PROG} is in the application menu (as 'attnviz'), and opens .gguf and .npz files")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
