"""Whether two strace -f logs made the same read() calls (returned sizes, in order) on each data file."""
import collections
import re
import sys

def reads(log, data_dir):
    fds, out, pending = {}, collections.defaultdict(list), {}
    for raw in open(log):
        raw = raw.rstrip()
        m = re.match(r"^(\d+)\s+(.*)<unfinished \.\.\.>$", raw)
        if m:
            pending[m.group(1)] = m.group(2); continue
        m = re.match(r"^(\d+)\s+<\.\.\. \w+ resumed>(.*)$", raw)
        if m:
            raw = f"{m.group(1)} {pending.pop(m.group(1), '')}{m.group(2)}"
        m = re.match(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+)", raw)
        if not m:
            continue
        pid, name, args, result = m.groups()
        if name == "openat" and data_dir in args and int(result) >= 0:
            fds[(pid, result)] = args.split('"')[1]
        elif (pid, args.split(",")[0]) in fds:
            path = fds[(pid, args.split(",")[0])]
            if name == "read":
                out[path].append(int(result))
            elif name == "close":
                del fds[(pid, args.split(",")[0])]
    return out

a, b = reads(sys.argv[1], sys.argv[3]), reads(sys.argv[2], sys.argv[3])
same = sum(a[p] == b[p] for p in a)
print(f"{len(a)} files in the first log, {len(b)} in the second; identical read() sequences: {same}")
