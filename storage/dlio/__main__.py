"""usage: python -m storage.dlio {export,replay} RUN_DIR [options] | checkpoint OUT [options]

export   writes RUN_DIR/dlio/: MLPerf Storage workload + datagen YAMLs and a DLIO 2.0.0 workload
         [--accelerator b200|mi355|h100|a100]  <model>_<accelerator>.yaml with that accelerator's
                                               batch and compute time (the benchmark's compute_times.csv)
         [--dataset-scale F]                   F x the benchmark's real training set (default 1)
         [--dataset-of-run]                    the samples this run's data held instead
         a run with storage phases (load_profile.json `phases`) also gets their DLIO workloads
         (mlperf_storage/phases/, dlio-2.0.0-phases/) and their section in MLPSTORAGE.md
replay   runs DLIO 2.0.0 (in its own environment, .venv-dlio, built on first use) on the exported
         workload and prints measured vs replayed samples/s, MB/s and AU; with --reader plugin, a DLIO
         reader plugin makes per sample the reads the profile recorded and compares them too;
         --dlio 3.0 runs DLIO 3.0.x (.venv-dlio3, built from a local copy: storage/dlio/environment/setup_env_3.sh),
         where --reader storage runs the MLPerf Storage workload itself and --reader object its
         object-storage form in the bucket the run read (s3dlio)
checkpoint  OUT is a `python -m storage.checkpoint --out` folder: writes OUT/dlio/, the DLIO checkpoint
         workloads closest to its emulated checkpoint (MLPerf Storage's schema, DLIO 2.0.0's);
         [--run [--root DIR]] runs DLIO 2.0.0's with the same ranks and prints the two side by side

Example:
    python -m storage.dlio export runs/recommendation_v4/myrun --accelerator b200
    python -m storage.dlio replay runs/recommendation_v4/myrun
"""

from __future__ import annotations

import sys

from common.command_line import example_in, help_epilog

DOCS = "docs/load-profile.md (export, replay), docs/checkpoints.md (checkpoint)"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        what = __doc__[:__doc__.index("\nExample:\n")].strip()
        print(what + "\n\n" + help_epilog(example_in(__doc__), DOCS), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "export":
        from common import command_line
        from storage.dlio.export.profile_reading import ExportError
        from storage.dlio.export.workloads import export

        parser = command_line.parser(
            "storage.dlio export", "Writes RUN_DIR/dlio/: the run's load as MLPerf Storage and DLIO 2.0.0 workloads.",
            example=example_in(__doc__).splitlines()[0],
            docs="docs/load-profile.md")
        parser.add_argument("run_dir")
        parser.add_argument("--accelerator", default=None)
        parser.add_argument("--dataset-scale", type=float, default=1.0)
        parser.add_argument("--dataset-of-run", action="store_true")
        try:
            args = parser.parse_args(rest)
        except SystemExit as exit_:
            return int(exit_.code or 0)
        try:
            written = export(args.run_dir, accelerator=args.accelerator,
                             dataset_scale=None if args.dataset_of_run else args.dataset_scale)
        except ExportError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        for path in written:
            print(f"[export] {path}")
        return 0
    if command == "replay":
        from storage.dlio.replay.cli import main as replay_main

        return replay_main(rest)
    if command == "checkpoint":
        from storage.dlio.export.checkpoint_workload import main as checkpoint_main

        return checkpoint_main(rest)
    print(f"error: unknown command {command!r} (export, replay or checkpoint)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
