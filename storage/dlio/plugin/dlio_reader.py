"""A DLIO 2.0.0 reader plugin that reads, per sample, what the trainer's loader read.

DLIO 2.0.0 loads a custom reader from the workload's `reader.reader_classname` (a dotted
`module.Class`; utils/config.py imports the module and keeps the class if it subclasses
reader.reader_handler.FormatReader), and its ReaderFactory then builds that class in every loader
worker as `cls(dataset_type, thread_index, epoch_number)` whatever `dataset.format` says. The
format still picks the files: DLIO lists the names in data_folder/train that end with it.

This reader takes its plan from data_folder/read_plan.json (storage.dlio.plugin.plan:
written with the data, so the plan and the files cannot disagree) and hands each sample to
plugin_sample_reader.SampleReader, which makes the sample's planned reads and counts them in memory-mapped
files under DLIO's output folder (plugin_reads/). Everything else is DLIO's own read_index: the
open/get_sample/close calls, the preprocess_time sleep, the dummy tensor it returns.

Importable only in DLIO's environment (.venv-dlio), with the repository root on PYTHONPATH.
"""

from __future__ import annotations

import os

from dlio_benchmark.reader.reader_handler import FormatReader

from storage.dlio.plugin.plan import PLAN_FILE, ReadPlan
from storage.dlio.plugin.sample_reader import COUNTS_DIR, ReadCounts, SampleReader


class ProfileReadsReader(FormatReader):
    def __init__(self, dataset_type, thread_index, epoch):
        super().__init__(dataset_type, thread_index)
        args = self._args
        plan = ReadPlan.load(os.path.join(args.data_folder, PLAN_FILE))
        # one counter pair per reading process and dataset: loader workers are processes (fork)
        tag = f"rank{args.my_rank}-pid{os.getpid()}-{dataset_type}-t{thread_index}"
        folder = os.path.join(args.output_folder, COUNTS_DIR)
        counts = ReadCounts(plan.files, folder, tag)
        ahead = ReadCounts(plan.files, folder, f"{tag}-ahead") if plan.window_samples else None
        self.reads = SampleReader(plan, self._file_list, counts, ahead)

    # DLIO's read_index calls open, get_sample and close around each sample; SampleReader opens
    # what the plan reads itself (a sample's reads may go to other files than the one DLIO names)
    def open(self, filename):
        return filename

    def close(self, filename):
        pass

    def get_sample(self, filename, sample_index):
        # read_index sets image_idx to the global sample index before it calls get_sample
        self.reads.read(int(self.image_idx), self.reads.home_of(filename))

    def next(self):
        yield from super().next()

    def read_index(self, global_sample_idx, step):
        return super().read_index(global_sample_idx, step)

    def finalize(self):
        # FormatReader.finalize walks an args.file_map that 2.0.0 never sets: close our files only
        self.reads.close()

    def is_index_based(self):
        return True

    def is_iterator_based(self):
        return True
