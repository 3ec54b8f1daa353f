"""The ``openmm-graph`` command line.

    openmm-graph inspect MODEL [--json]
    openmm-graph make-model --grade small|medium|large --seed N -o OUT [options]
    openmm-graph train [CONFIG.json] [--data PATH ...] [-o OUT] [options] [--set KEY=JSON ...]
    openmm-graph convert-deepmd MODEL.pth -o OUT [--intervals K] [--r0 R0] [--dtype float64|float32]

``inspect`` also takes a PyTorch model exported for openmm-graph (a
TorchScript archive or an AOTInductor package) and prints its metadata.
Errors print one line ``openmm-graph: error: ...`` on stderr and exit with
status 2 (no traceback); output whose reader went away (``| head``) ends
the command with status 1 and no message.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import warnings

from . import grades
from .modelfile import (ACTIVATIONS, ENERGY_UNITS_KJ_PER_MOL, LENGTH_UNITS_NM, ModelFile, check_output_path, read_model,
                        read_model_bytes)

PROGRAM = "openmm-graph"


class _UsageError(Exception):
    """A command-line usage error (reported in one line, exit status 2)."""


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


def _layer_shapes(layers) -> list[dict]:
    return [
        {
            "weight": [layer.out_size, layer.in_size],
            "residual": layer.residual,
            "timestep": layer.timestep is not None,
        }
        for layer in layers
    ]


def describe_model(model: ModelFile) -> dict:
    """A JSON-ready summary of a model: units, types, descriptor, networks, sizes, FLOPs."""
    summary = {
        "length_unit": model.length_unit,
        "energy_unit": model.energy_unit,
        "length_scale_nm": model.length_scale_nm,
        "energy_scale_kj_per_mol": model.energy_scale_kj_per_mol,
        "types": [
            {"index": index, "name": name, "atomic_number": number}
            for index, (name, number) in enumerate(zip(model.type_names, model.type_atomic_numbers))
        ],
        "cutoff": model.cutoff,
        "cutoff_nm": model.cutoff_nm,
        "n_channels": model.n_channels,
        "n_axis": model.n_axis,
        "l_max": model.l_max,
        "descriptor_l_sum": model.descriptor_l_sum,
        "descriptor_size": model.descriptor_size,
        "n_norm": model.n_norm,
        "radial_r0": model.radial_r0,
        "radial_dr": model.radial_dr,
        "radial_intervals": model.radial_intervals,
        "activation": model.activation,
        "n_interactions": model.n_interactions,
        "fitting_networks": [_layer_shapes(model.fitting_layers(a)) for a in range(model.n_types)],
        "node_networks": (
            [_layer_shapes(model.node_layers(a)) for a in range(model.n_types)] if model.n_interactions == 1 else []
        ),
        "network_parameters": model.network_parameter_count,
        "table_values": model.table_value_count,
        "flops_per_edge": grades.flops_per_edge(model),
        "flops_per_node": grades.flops_per_node(model),
        "file_dtype": model.file_dtype,
    }
    return summary


def _format_network(layers: list[dict]) -> str:
    parts = []
    for layer in layers:
        out_size, in_size = layer["weight"]
        text = f"{in_size}->{out_size}"
        if layer["residual"]:
            text += " (residual" + (", timestep)" if layer["timestep"] else ")")
        parts.append(text)
    return ", ".join(parts)


def _format_summary(path: str, summary: dict) -> str:
    types = ", ".join(f"{t['index']}: {t['name']} (Z={t['atomic_number']})" for t in summary["types"])
    lines = [
        f"model: {path}",
        f"units: length {summary['length_unit']} (= {summary['length_scale_nm']!r} nm), "
        f"energy {summary['energy_unit']} (= {summary['energy_scale_kj_per_mol']!r} kJ/mol)",
        f"types: {types}",
        f"cut-off: {summary['cutoff']!r} {summary['length_unit']} = {summary['cutoff_nm']!r} nm",
        f"channels M: {summary['n_channels']}, axis channels M_axis: {summary['n_axis']}, l_max L: {summary['l_max']}, "
        f"l-sum: {'yes' if summary['descriptor_l_sum'] else 'no'}, descriptor size: {summary['descriptor_size']}",
        f"n_norm: {summary['n_norm']!r}",
        f"radial table: r_0 = {summary['radial_r0']!r}, dr = {summary['radial_dr']!r}, "
        f"K = {summary['radial_intervals']} intervals ({summary['length_unit']})",
        f"activation: {summary['activation']}, interactions: {summary['n_interactions']}",
    ]
    for index, layers in enumerate(summary["fitting_networks"]):
        lines.append(f"fitting network of type {index}: {_format_network(layers)}")
    for index, layers in enumerate(summary["node_networks"]):
        lines.append(f"node network of type {index}: {_format_network(layers)}")
    lines += [
        f"parameters: {summary['network_parameters']} in networks, {summary['table_values']} table values",
        f"FLOPs (forward + backward): {summary['flops_per_edge']} per edge, {summary['flops_per_node']} per node",
        f"file dtype: {summary['file_dtype']}",
    ]
    lines.append(_sha256_line(summary))
    return "\n".join(lines)


def _format_archive(path: str, summary: dict) -> str:
    """inspect's text for a PyTorch model exported for openmm-graph (a zip: docs/torch-models.md): its metadata."""
    lines = [f"model: {path}", "kind: a PyTorch model exported for openmm-graph (TorchScript archive or AOTInductor "
             "package; docs/torch-models.md): the metadata it declares"]
    lines += [f"{key}: {json.dumps(value)}" for key, value in summary.items() if key != "sha256"]
    lines.append(_sha256_line(summary))
    return "\n".join(lines)


def _sha256_line(summary: dict) -> str:
    return f"sha256: {summary['sha256']} (a serialized System's GraphForce records it as modelSha256)"


def _inspect(arguments) -> int:
    data = read_model_bytes(arguments.model)  # once: the path may be a pipe
    if data[:4] == b"PK\x03\x04":  # a zip: an exported TorchScript archive or AOTInductor package, not a safetensors file
        from .torch_export import read_metadata  # imports torch: only for such files

        summary, format_text = read_metadata(data, source=arguments.model), _format_archive
    else:
        summary, format_text = describe_model(read_model(data, source=arguments.model)), _format_summary
    # The digest a serialized System's GraphForce records as modelSha256 (docs/implementation-notes.md, Serialization):
    # it tells which model file a System was built with.
    summary["sha256"] = hashlib.sha256(data).hexdigest()
    print(json.dumps(summary, indent=2) if arguments.json else format_text(arguments.model, summary))
    return 0


def _comma_list(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list without empty items, found {text!r}")
    return items


def _width_list(text: str) -> list[int]:
    try:
        widths = [int(item) for item in _comma_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, found {text!r}") from None
    return widths


def _make_model(arguments) -> int:
    if arguments.seed < 0:
        raise _UsageError(f"argument --seed: expected an integer >= 0, found {arguments.seed}")
    check_output_path(arguments.output, "make-model: output")  # before the tables and weights are made
    model = grades.make_model(
        grade=arguments.grade,
        seed=arguments.seed,
        dtype=arguments.dtype,
        l_max=arguments.l_max,
        descriptor_l_sum=arguments.l_sum,
        n_interactions=arguments.interactions,
        n_channels=arguments.channels,
        n_axis=arguments.axis,
        fitting_widths=arguments.widths,
        radial_intervals=arguments.intervals,
        activation=arguments.activation,
        length_unit=arguments.length_unit,
        energy_unit=arguments.energy_unit,
        type_names=arguments.types,
    )
    model.write(arguments.output, dtype=arguments.dtype)
    print(f"wrote {arguments.output}: grade {arguments.grade}, seed {arguments.seed}, {arguments.dtype}")
    return 0


# Options of `train` with their own flag: (flag, TrainingConfig field, argparse type).
_TRAIN_FLAGS = (
    ("--format", "data_format", str), ("--epochs", "epochs", int), ("--batch-size", "batch_size", int),
    ("--cutoff", "cutoff", float), ("--radial", "radial", str), ("--channels", "n_channels", int),
    ("--axis", "n_axis", int), ("--l-max", "l_max", int), ("--interactions", "n_interactions", int),
    ("--embedding-widths", "embedding_widths", _width_list), ("--fitting-widths", "fitting_widths", _width_list),
    ("--activation", "activation", str), ("--start-lr", "start_lr", float), ("--stop-lr", "stop_lr", float),
    ("--validation-fraction", "validation_fraction", float), ("--seed", "seed", int),
    ("--intervals", "intervals", int), ("--r0", "r0", float), ("--checkpoint-dir", "checkpoint_dir", str),
    ("--checkpoint-every", "checkpoint_every", int), ("--length-unit", "length_unit", str),
    ("--energy-unit", "energy_unit", str), ("--type-map", "type_map", _comma_list),
    ("--precision", "precision", str), ("--dtype", "output_dtype", str),
)


def _train(arguments) -> int:
    from .training.train import TrainingConfig, train

    values = {}
    if arguments.config is not None:
        from .modelfile import _reject_duplicate_keys

        try:
            with open(arguments.config, encoding="utf-8") as stream:
                values = json.load(stream, object_pairs_hook=_reject_duplicate_keys)
        except json.JSONDecodeError as error:
            raise ValueError(f"{arguments.config}: not valid JSON ({error})") from None
        except UnicodeDecodeError as error:
            raise ValueError(f"{arguments.config}: not UTF-8 text ({error.reason} at byte {error.start})") from None
        except ValueError as error:  # _reject_duplicate_keys: a key given twice in one object
            raise ValueError(f"{arguments.config}: {error} in a JSON object (each option once)") from None
        except RecursionError:
            raise ValueError(f"{arguments.config}: JSON nested too deeply to be a file of training options") from None
        if not isinstance(values, dict):
            raise ValueError(f"{arguments.config}: expected a JSON object of training options")
    for _, name, _ in _TRAIN_FLAGS:
        value = getattr(arguments, name)
        if value is not None:
            values[name] = value
    if arguments.data:
        values["data"] = arguments.data
    if arguments.output is not None:
        values["output"] = arguments.output
    if arguments.no_progress:
        values["progress"] = False
    for item in arguments.set or []:
        key, separator, text = item.partition("=")
        if not separator or not key:
            raise _UsageError(f"--set: expected KEY=VALUE, found {item!r}")
        try:
            values[key] = json.loads(text)
        except json.JSONDecodeError:
            values[key] = text
    config = TrainingConfig.from_dict(values)
    with warnings.catch_warnings():
        # torch.func initialises itself with torch.jit.script on first use (compress's jvp), and torch 2.15 warns
        # that torch.jit.script is deprecated: torch's own business, not the training's (nothing here is scripted).
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
        train(config)
    return 0


def _convert_deepmd(arguments) -> int:
    from .convert.deepmd import convert_deepmd
    from .modelfile import same_or_inside

    # Before any work: the output must not be the input model, and must be writable.
    if same_or_inside(arguments.output, arguments.model) == "is":
        raise _UsageError(f"convert-deepmd: the output {arguments.output!r} is the input model {arguments.model!r}; "
                          "choose another output path")
    check_output_path(arguments.output, "convert-deepmd: output")
    # PyTorch's and DeePMD-kit's own notices while reading the model (TorchScript deprecations, DeePMD-kit's
    # thread-count advice) are not the user's business here; the converter's own warnings still print.
    deepmd_log = logging.getLogger("deepmd")
    level = deepmd_log.level
    deepmd_log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"(torch|deepmd)(\.|$)")
            model_file = convert_deepmd(arguments.model, intervals=arguments.intervals, r0=arguments.r0)
    finally:
        deepmd_log.setLevel(level)
    model_file.write(arguments.output, dtype=arguments.dtype)
    print(f"wrote {arguments.output}: DeePMD-kit se_e2_a model {arguments.model} ({model_file.n_types} types "
          f"{model_file.type_names}, cutoff {model_file.cutoff:g} A, eV); {model_file.report.summary()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog=PROGRAM, description="Inspect, generate and train openmm-graph model files.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)

    inspect = commands.add_parser("inspect", help="print a model's units, shapes, sizes and FLOPs")
    inspect.add_argument("model", help="model file (.safetensors), or a PyTorch model exported for openmm-graph (.pt, .pt2)")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.set_defaults(run=_inspect)

    make = commands.add_parser("make-model", help="write a random, well-formed model of a benchmark grade")
    make.add_argument("--grade", choices=sorted(grades.GRADES), default="small")
    make.add_argument("--seed", type=int, default=0)
    make.add_argument("-o", "--output", required=True, help="output model file")
    make.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    make.add_argument("--l-max", type=int, choices=(0, 1, 2), default=None)
    make.add_argument("--l-sum", action=argparse.BooleanOptionalAction, default=None,
                      help="sum the invariants over degrees (default: the grade's)")
    make.add_argument("--interactions", type=int, choices=(0, 1), default=None)
    make.add_argument("--channels", type=int, default=None, help="M")
    make.add_argument("--axis", type=int, default=None, help="M_axis")
    make.add_argument("--widths", type=_width_list, default=None, help="fitting widths, e.g. 128,128,128")
    make.add_argument("--intervals", type=int, default=None, help="table intervals K (default 400)")
    make.add_argument("--types", type=_comma_list, default=None, help="type names, e.g. O,H")
    make.add_argument("--length-unit", choices=tuple(LENGTH_UNITS_NM), default="nm")
    make.add_argument("--energy-unit", choices=tuple(ENERGY_UNITS_KJ_PER_MOL), default="kJ/mol")
    make.add_argument("--activation", choices=ACTIVATIONS, default=None)
    make.set_defaults(run=_make_model)

    trainer = commands.add_parser(
        "train", help="train a model on energies and forces, compress it and write the model file",
        description="Train a model (docs/training.md). Options come from the JSON CONFIG (keys of "
                    "openmmgraph.training.TrainingConfig), overridden by the flags and --set.")
    trainer.add_argument("config", nargs="?", default=None, help="JSON file of training options")
    trainer.add_argument("--data", nargs="+", default=None, help="extended XYZ files and/or DeePMD-kit npy systems")
    trainer.add_argument("-o", "--output", default=None, help="output model file (default model.safetensors)")
    for flag, name, kind in _TRAIN_FLAGS:
        trainer.add_argument(flag, dest=name, type=kind, default=None, help=f"training option '{name}'")
    trainer.add_argument("--no-progress", action="store_true", help="no progress bar or per-epoch lines")
    trainer.add_argument("--set", action="append", metavar="KEY=VALUE",
                         help="any training option, VALUE as JSON (e.g. --set start_pref_f=100)")
    trainer.set_defaults(run=_train)

    converter = commands.add_parser(
        "convert-deepmd", help="convert a DeePMD-kit se_e2_a energy model (PyTorch backend) to a model file",
        description="Convert a DeePMD-kit se_e2_a model (.pth from `dp --pt freeze`, or a .pt checkpoint) "
                    "(docs/deepmd-import.md); models that cannot be mapped exactly are refused.")
    converter.add_argument("model", help="DeePMD-kit model (.pth or .pt)")
    converter.add_argument("-o", "--output", required=True, help="output model file (.safetensors)")
    converter.add_argument("--intervals", type=int, default=2000, help="radial table intervals K (default 2000)")
    converter.add_argument("--r0", type=float, default=0.5,
                           help="first table knot in Angstrom (default 0.5; lowered slightly so rcut_smth is a knot); "
                                "must lie below every interatomic distance of the simulation")
    converter.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    converter.set_defaults(run=_convert_deepmd)
    return parser


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0, or 2 after a one-line error)."""
    parser = build_parser()
    try:
        arguments = parser.parse_args(argv)
        status = arguments.run(arguments)
        sys.stdout.flush()  # here, so that a reader that went away is met below, not at the interpreter's exit
        return status
    except BrokenPipeError:
        # The reader of the output went away (`openmm-graph inspect m.safetensors | head`): not the command's error.
        # Whatever is still buffered goes nowhere, so that the interpreter's own flush at exit does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (_UsageError, ValueError, OSError, MemoryError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        if isinstance(error, MemoryError):  # sizes within the format's limits can still exceed the machine
            message = f"out of memory ({message}); choose smaller sizes (or a smaller input)"
        print(f"{PROGRAM}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
