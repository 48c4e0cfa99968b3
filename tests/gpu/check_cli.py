"""What the GPU check's comparison scripts (graph_check.py, hosts_check.py) share: their command line,
`run` (one process, one allocator, writes JSON) and `compare` (reads them, prints STATUS|step|detail
rows), and what counts as equal results."""
import argparse


def close(a, b):
    """Equal results: the same structure, numbers equal up to 1e-6 relative (a kernel's reduction order
    may depend on addresses), anything else exactly."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))
    return a == b


def line_of(path, marker):
    """The number of the first line of `path` that holds `marker`, other than a line that asks for it
    (one holding `line_of(`); -1 if none does."""
    with open(path) as f:
        for number, text in enumerate(f, 1):
            if marker in text and "line_of(" not in text:
                return number
    return -1


def main(checks, allocators, run, compare):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--allocator", choices=allocators, required=True)
    r.add_argument("--checks", default=",".join(checks))
    r.add_argument("--bench", action="store_true")
    r.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("paths", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if args.cmd == "run":
        run(args)
    else:
        for row in compare(args.paths):
            print("|".join(str(x) for x in row))
