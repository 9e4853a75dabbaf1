"""The `attnviz render` command line: its parser, generated from the RunConfig fields and their metadata
(one flag per field, help text from the tooltip, range from minimum/maximum), the view and output flags, and
the readers of flag values that are not plain numbers."""

from __future__ import annotations

import argparse
import os
from dataclasses import MISSING, fields

RENDER_PROG = "attnviz render"
# What a text flag takes, as its help line shows it (NAME for the rest: a stack, a device ...)
STR_METAVARS = {"text": "TEXT", "decoder_text": "TEXT", "model": "DIR_OR_GGUF", "image": "FILE", "maps": "FILE.npz"}


def view_text() -> dict[str, str]:
    """--view choices: every map view (from the one stage list) and the output tensor."""
    from attnviz.frames import MAP_VIEWS

    return {**MAP_VIEWS, "output": "the output tensor (rows = query positions, columns = features)",
            "pipeline": "every stage of one head's attention call as one figure (--head N, default 0); "
                        ".npz keeps that head's stages"}


class UsageError(Exception):
    """A bad command line: exit 2 with this message."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports an error as one line (prog: error: message) and exits 2."""

    def error(self, message: str):  # noqa: D102 - argparse API
        raise UsageError(f"{message} (see '{self.prog} --help')")


def flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def _kv_lengths(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid lengths {text!r}: give whole numbers separated by commas, e.g. 16,9") from None


def _region(text: str) -> tuple[int, int, int, int]:
    """'q0:q1,k0:k1' -> (q0, q1, k0, k1)."""
    try:
        rows, cols = text.split(",")
        (q0, q1), (k0, k1) = (tuple(int(x) for x in part.split(":")) for part in (rows, cols))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give query rows and keys as Q0:Q1,K0:K1, e.g. 0:64,0:512") \
            from None
    return q0, q1, k0, k1


def text_file(path: str) -> str:
    """A text file's contents: UTF-8, a regular file of at most 16 MiB, else one line."""
    from attnviz.core.runs.configfile import TextFileError, read_text_file

    try:
        return read_text_file(path)
    except TextFileError as exc:
        raise UsageError(f"--text-file {path}: {exc}") from None


def stage_names() -> tuple[str, ...]:
    from attnviz.core.kernel.stages import STAGE_NAMES

    return STAGE_NAMES


def _stage_list(text: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    if names == ("all",):
        return stage_names()
    unknown = [n for n in names if n not in stage_names()]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"invalid stages {text!r}: use 'all' or names from {', '.join(stage_names())}, separated by commas")
    return names


def _config_choices() -> dict[str, list[str]]:
    """Choice lists of the str fields: variants and dtypes, plus each field's declared choices."""
    from attnviz.core import DTYPES, VARIANTS
    from attnviz.core.runs.config import RunConfig

    declared = {f.name: list(f.metadata["choices"]) for f in fields(RunConfig) if f.metadata.get("choices")}
    return {"variant": list(VARIANTS), "dtype": list(DTYPES), **declared}


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per RunConfig field, from its type and metadata; absent flags leave the value alone."""
    from attnviz.core.runs.config import FILE_FIELDS, RunConfig

    choices = _config_choices()
    group = parser.add_argument_group(
        "run configuration (defaults < --preset/--config < these flags)",
        "Without --preset/--config, --variant starts from that variant's own defaults (its seed's mask and biases).")
    for f in fields(RunConfig):
        meta = f.metadata
        default = f.default if f.default is not MISSING else None
        help_text = meta.get("tooltip", "")
        lo, hi = meta.get("minimum"), meta.get("maximum")
        if lo is not None and hi is not None:
            help_text += f" [{lo}..{hi}]"
        kwargs: dict = dict(dest=f.name, default=argparse.SUPPRESS)
        if f.type == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
            help_text += f" (default: {'on' if default else 'off'})"
        elif f.type == "int":
            kwargs.update(type=int, metavar="N")
        elif f.type == "float":
            kwargs.update(type=float, metavar="X")
        elif f.name in FILE_FIELDS:  # your own weights / inputs: kept absolute, so a saved config finds them
            kwargs.update(type=os.path.abspath, metavar="FILE")
        elif f.type == "str":
            if f.name in choices:
                kwargs["choices"] = choices[f.name]
            kwargs["metavar"] = ("{" + ",".join(choices[f.name]) + "}" if f.name in choices
                                 else STR_METAVARS.get(f.name, "NAME"))
        elif f.name == "kv_lengths":
            kwargs.update(type=_kv_lengths, metavar="N[,N...]")
        elif f.name == "ablate":
            kwargs.update(type=lambda text: tuple(p.strip() for p in text.split(",") if p.strip()),
                          metavar="L.H[,L.H...]")
        else:  # a field type the generator does not know: skip rather than guess
            continue
        if f.type != "bool" and default not in (None, (), ""):
            help_text += f" (default: {default})"
        kwargs["help"] = help_text.replace("%", "%%")
        group.add_argument(flag_of(f.name), **kwargs)


def render_parser() -> argparse.ArgumentParser:
    from attnviz.export import FORMATS

    p = _Parser(
        prog=RENDER_PROG,
        description="Run one configuration headless and export it as PNG, SVG or NPZ "
                    "(chosen by the output's extension).",
        epilog="Example: attnviz render --preset seed000-demo --view scores -o scores.svg",
    )
    p.add_argument("-o", "--output", metavar="FILE",
                   help="where to write (required): " + ", ".join(f"{k} ({v})" for k, v in FORMATS.items()))
    p.add_argument("--list-presets", action="store_true", help="list the presets and exit")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", metavar="NAME", help="start from a named preset (see --list-presets)")
    src.add_argument("--config", metavar="FILE.json", help="start from a saved configuration")
    _add_config_flags(p)
    _add_view_flags(p)
    _add_extra_flags(p)
    return p


def _add_view_flags(p: argparse.ArgumentParser) -> None:
    """What to draw: the stage, heads, colours, labels (PNG and SVG), and the NPZ's extra stages."""
    from attnviz import colormaps
    from attnviz.frames import SCALE_MODES

    view = p.add_argument_group("what to draw (PNG and SVG)")
    views = view_text()
    view.add_argument("--view", choices=list(views), default="weights",
                      help="; ".join(f"{k}: {v}" for k, v in views.items()) + " (default: weights)")
    view.add_argument("--stages", metavar="NAME[,NAME...]|all", type=_stage_list,
                      help="stages an NPZ keeps besides the default ones (names: "
                           f"{', '.join(stage_names())}; 'all' keeps every stage the run has)")
    view.add_argument("--head", type=int, metavar="N", help="only head N instead of the grid of all heads")
    view.add_argument("--mean", action="store_true", help="only the mean over heads")
    view.add_argument("--batch-index", type=int, default=0, metavar="N",
                      help="which batch item to draw (default: 0)")
    view.add_argument("--colormap", choices=colormaps.names(), metavar="NAME",
                      help=f"one of {', '.join(colormaps.names())} (default: {colormaps.DEFAULT_SEQUENTIAL} "
                           f"for weights, {colormaps.DEFAULT_DIVERGING} for scores and output)")
    view.add_argument("--per-head-scale", action="store_true",
                      help="give each head its own colour scale (default: one scale for all heads)")
    view.add_argument("--scale", type=int, metavar="PX",
                      help="pixels per cell (default: auto, so a tile is at least ~240 px)")
    view.add_argument("--no-title", action="store_true", help="no title lines and no tile titles")
    view.add_argument("--no-colorbar", action="store_true", help="no colour bar")
    view.add_argument("--no-labels", action="store_true", help="no position ticks and axis labels")
    view.add_argument("--all-labels", action="store_true",
                      help="label every token (by default every k-th where the cells are smaller than a label); "
                           "without --scale the cells are made tall enough for one")
    view.add_argument("--scale-mode", choices=list(SCALE_MODES), default="linear",
                      help="colour scale of the maps: " + "; ".join(SCALE_MODES.values()) + " (default: linear)")
    view.add_argument("--rollout", action="store_true",
                      help="draw attention rollout over the layers instead of the maps (multi-layer models only); "
                           "with .npz, add the rollout array")


def _add_extra_flags(p: argparse.ArgumentParser) -> None:
    """The side outputs (statistics, predictions, head scores) and the pretrained models' own flags."""
    p.add_argument("--stats", metavar="FILE.csv",
                   help="also write per-head statistics (entropy, max weight, mean distance, first key, previous "
                        "token, diagonal) as CSV; -o may then be left out")
    heads = p.add_argument_group("what heads do (models with an output head: the toys, causal and masked LMs)")
    heads.add_argument("--predictions", metavar="FILE.csv",
                       help="also write each position's top-k next tokens, the target and its probability (with "
                            "--ablate: the unablated probability and the KL divergence); -o may then be left out")
    heads.add_argument("--head-scores", metavar="FILE.csv",
                       help="also write each head's type scores (previous_token, first_token, self, duplicate_token, "
                            "induction); -o may then be left out")
    heads.add_argument("--patch-heads", metavar="FILE.csv",
                       help="also write activation patching: each head's share of the clean-minus-corrupted logit "
                            "difference (--answer minus --wrong at the last position) restored when its output is "
                            "copied from --text into --corrupted-text; -o may then be left out")
    heads.add_argument("--corrupted-text", metavar="TEXT", help="with --patch-heads: the text with the part that "
                       "decides the answer changed, as many tokens as --text")
    heads.add_argument("--answer", metavar="TOKEN", help="with --patch-heads: the clean text's answer, one token "
                       "(with its leading space where words have one, e.g. ' Mary')")
    heads.add_argument("--wrong", metavar="TOKEN", help="with --patch-heads: the answer the corrupted text points to, "
                       "one token")
    model = p.add_argument_group("pretrained models (--model DIR implies --variant pretrained)")
    model.add_argument("--text-file", metavar="FILE",
                       help="read the text from a UTF-8 file (a long input) instead of --text")
    model.add_argument("--region", type=_region, metavar="Q0:Q1,K0:K1",
                       help="also keep that block of every map exact (query rows Q0..Q1-1, keys K0..K1-1); the run "
                            "pools its maps (--pool always) and the NPZ holds the block as `region`")
    model.add_argument("--step", type=int, metavar="N",
                       help="with --generate: the generation after N generated tokens (default: all), as the window's "
                            "Step slider shows it: an image fades the later rows and frames the Nth token's row; an "
                            "NPZ, --stats and --predictions hold the first prompt + N tokens")
    model.add_argument("--all-layers", action="store_true",
                       help="NPZ: also every layer's weights as layer_weights (layers, H, L, L)")
    model.add_argument("--truncate", action="store_true",
                       help="cut a text longer than the model's positions to what fits (else exit 2)")


def options_markdown() -> str:
    """The render parser's options as Markdown, group by group: the README's option list is this text
    (`python -m attnviz.cli_flags` prints it; a test keeps the README equal to it)."""
    parser = render_parser()
    formatter = parser._get_formatter()  # noqa: SLF001 - argparse's own spelling of each flag
    lines: list[str] = []
    for group in parser._action_groups:  # noqa: SLF001
        actions = [a for a in group._group_actions if a.option_strings and a.help != argparse.SUPPRESS]  # noqa: SLF001
        if not actions:
            continue
        title = "options" if group.title in ("options", "optional arguments") else group.title
        lines += ["", f"**{title}**" + (f": {group.description}" if group.description else ""), ""]
        for action in actions:
            flag = formatter._format_action_invocation(action)  # noqa: SLF001
            text = (action.help or "").replace("%%", "%").replace("*", "\\*").replace("<", "&lt;")
            lines.append(f"- `{flag}`: {text}")
    return "\n".join(lines).strip() + "\n"


if __name__ == "__main__":
    print(options_markdown(), end="")
