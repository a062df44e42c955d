"""Per data file, from an `strace -f -o` log: the syscalls on each JPEG's fd between its openat and close."""
import collections
import re
import sys

log, data_dir = sys.argv[1], sys.argv[2]
line_re = re.compile(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+|\?)")
open_fds = {}  # (pid, fd) -> path
calls = collections.Counter()
reads = []  # per file: [(size asked, returned, offset known?)]
per_file = collections.defaultdict(list)
stats_by_path = 0
pending = {}
for raw in open(log):
    # join "unfinished ... resumed" pairs by pid
    m = re.match(r"^(\d+)\s+(.*)<unfinished \.\.\.>$", raw.rstrip())
    if m:
        pending[m.group(1)] = m.group(2)
        continue
    m = re.match(r"^(\d+)\s+<\.\.\. \w+ resumed>(.*)$", raw.rstrip())
    if m:
        raw = f"{m.group(1)} {pending.pop(m.group(1), '')}{m.group(2)}"
    m = line_re.match(raw)
    if not m:
        continue
    pid, name, args, result = m.groups()
    if name in ("newfstatat", "statx", "stat", "lstat") and data_dir in args and '""' not in args:
        stats_by_path += 1
    if name == "openat" and data_dir in args and result not in ("?",) and int(result) >= 0:
        path = args.split('"')[1]
        open_fds[(pid, result)] = path
        per_file[path].append(("openat", 0))
        continue
    fd = args.split(",")[0].strip()
    key = (pid, fd)
    if key not in open_fds:
        continue
    path = open_fds[key]
    if name == "fcntl" and "F_DUPFD" in args and int(result) >= 0:  # numpy's fromfile reads through a dup
        open_fds[(pid, result)] = path
    returned = int(result) if result.lstrip("-").isdigit() else 0
    per_file[path].append((name, returned if name in ("read", "pread64") else 0))
    if name == "close":
        del open_fds[key]
files = len(per_file)
counter = collections.Counter()
read_bytes = 0
pattern = collections.Counter()
for path, ops in per_file.items():
    for name, n in ops:
        counter[name] += 1
        read_bytes += n
    pattern[tuple(name for name, _ in ops)] += 1
print(f"{files} data files opened; stat calls by path on data files: {stats_by_path}")
for name, count in sorted(counter.items()):
    print(f"  {name:12s} {count:6d} total, {count / files:.2f} per file")
print(f"  bytes read   {read_bytes:,} total, {read_bytes / files:,.0f} per file")
print("most common sequences per file:")
for seq, count in pattern.most_common(3):
    print(f"  {count:4d} x {' '.join(seq)}")
