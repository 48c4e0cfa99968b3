"""Reports of several ranks and their comparison, on the host backend: under a launcher each rank's
report goes to its own file and names its rank (Note [Ranks]); `python -m tracepool merge` shows them
as one with the imbalance between them; `python -m tracepool diff` gives each site's change."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tracepool

MiB = 1 << 20
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                      "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS")

# Leaks 1 MiB a step at `keep` (steps: argv[1], or 3 + 2 * RANK), churns 4 MiB at `churn`; with
# argv[2] == "extra", also holds 2 MiB at `extra`.
PROGRAM = """\
import os, sys, tracepool
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3 + 2 * int(os.environ.get("RANK", "0"))
kept = []
def keep(n):
    kept.append(tracepool.alloc(n))  # keep
for step in range(steps):
    keep(1 << 20)  # call keep
    tracepool.free(tracepool.alloc(4 << 20))  # churn
    tracepool.mark("step %d" % step)
if sys.argv[2:] == ["extra"]:
    held = tracepool.alloc(2 << 20)  # extra
"""


def line_of(path, marker):
    return [i for i, text in enumerate(Path(path).read_text().splitlines(), 1) if text.endswith("# " + marker)][0]


def keep_title(program):
    """The title of the site that keeps memory (Note [Site titles]): its line, then its caller's."""
    return "keep (prog.py:%d) \u2190 <module> (:%d)" % (line_of(program, "keep"), line_of(program, "call keep"))


def module_title(program, marker):
    return "<module> (prog.py:%d)" % line_of(program, marker)


def cli(*args, env=None, cwd=None):
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES and k != "TRACEPOOL_REPORT"}
    base["TRACEPOOL_CONF"] = "backend:host"
    base.update(env or {})
    return subprocess.run([sys.executable, "-m", "tracepool", *map(str, args)], env=base, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    return path


def run_ranks(program, output, ranks=2):
    for rank in range(ranks):
        r = cli("run", "--no-torch", "-o", output, program,
                env={"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(ranks)})
        assert r.returncode == 0, r.stderr


def test_each_rank_writes_its_own_report_naming_its_rank(program, tmp_path):
    run_ranks(program, tmp_path / "report.json")
    assert not (tmp_path / "report.json").exists()
    for rank in (0, 1):
        saved = json.loads((tmp_path / ("report-rank%d.json" % rank)).read_text())
        assert saved["process"]["rank"] == rank
        assert saved["process"]["local_rank"] == rank
        assert saved["process"]["world_size"] == 2
        assert saved["process"]["pid"] > 0
        assert sum(s["bytes"] for s in saved["leaks"]) == (3 + 2 * rank) * MiB
    # Rendered as text, a rank's report says whose it is.
    text = cli("report", tmp_path / "report-rank1.json").stdout
    assert "rank 1 of 2 (local rank 1), pid " in text


def test_paths_take_rank_pid_and_host_placeholders(program, tmp_path):
    r = cli("run", "--no-torch", "-o", tmp_path / "r-{rank}-{pid}-{host}.json", program, env={"RANK": "1", "WORLD_SIZE": "2"})
    assert r.returncode == 0, r.stderr
    [written] = list(tmp_path.glob("r-1-*.json"))
    saved = json.loads(written.read_text())
    assert written.name == "r-1-%d-%s.json" % (saved["process"]["pid"], saved["process"]["host"].replace("/", "_"))
    assert "report written to %s" % written in r.stderr
    # TRACEPOOL_REPORT takes them too, and without a launcher a path is used as given.
    env = {"TRACEPOOL_REPORT": str(tmp_path / "exit-{rank}.json")}
    assert cli("run", "--no-torch", program, env=env).returncode == 0
    assert (tmp_path / "exit-0.json").exists()


def test_report_path_says_where_a_report_goes(monkeypatch):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert tracepool.report_path("out/report.json") == "out/report.json"
    assert tracepool.report_path("r{rank}-{pid}.json") == "r0-%d.json" % os.getpid()
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert tracepool.report_path("out/report.json") == "out/report-rank3.json"
    assert tracepool.report_path("stderr") == "stderr"
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert tracepool.report_path("out/report.json") == "out/report.json"


def test_merge_shows_each_site_across_ranks_and_the_imbalance(program, tmp_path):
    run_ranks(program, tmp_path / "report.json")
    files = sorted(tmp_path.glob("report-rank*.json"), reverse=True)  # order given does not matter
    r = cli("merge", *files)
    assert r.returncode == 0, r.stderr
    keep = keep_title(program)
    assert "== tracepool merge: 2 reports of a world of 2" in r.stdout
    assert "Imbalance: rank 1 holds 2.00 MiB more live memory than rank 0" in r.stdout
    assert "  +2.00 MiB at %s" % keep in r.stdout
    assert "rank 0 3.00 MiB  rank 1 5.00 MiB  (most: rank 1, 1.25x the mean)" in r.stdout
    assert "GROWING on rank 0, rank 1" in r.stdout

    r = cli("merge", "-o", tmp_path / "merged.json", *files)
    assert r.returncode == 0, r.stderr
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["schema"] == "tracepool.merge/1"
    assert [m["rank"] for m in merged["reports"]] == [0, 1]
    [site] = [s for s in merged["sites"] if s["where"] == keep]
    assert site["live_bytes"] == [3 * MiB, 5 * MiB]
    assert site["most_live"] == "rank 1" and site["imbalance"] == 1.25
    assert site["growing"] == [True, True]
    [churn] = [s for s in merged["sites"] if s["where"] == module_title(program, "churn")]
    assert churn["live_bytes"] == [0, 0] and min(churn["cached_bytes"]) > 0


def test_merge_of_many_reports_shows_their_spread(program, tmp_path):
    for i in range(10):  # no launcher: reports are named by their files
        assert cli("run", "--no-torch", "-o", tmp_path / ("r%d.json" % i), program, str(i + 1)).returncode == 0
    r = cli("merge", *sorted(tmp_path.glob("r*.json")))
    assert r.returncode == 0, r.stderr
    assert "min 1.00 MiB  median 5.50 MiB  max 10.00 MiB  (most: r9.json, 1.82x the mean)" in r.stdout


def test_diff_gives_each_sites_change(program, tmp_path):
    assert cli("run", "--no-torch", "-o", tmp_path / "before.json", program, "2").returncode == 0
    assert cli("run", "--no-torch", "-o", tmp_path / "after.json", program, "5", "extra").returncode == 0
    r = cli("diff", tmp_path / "before.json", tmp_path / "after.json")
    assert r.returncode == 0, r.stderr
    keep = keep_title(program)
    extra = module_title(program, "extra")
    assert "  allocated 2.00 MiB -> 7.00 MiB (+5.00 MiB)" in r.stdout
    assert "  %s\n      live 2.00 MiB -> 5.00 MiB, cached " % keep in r.stdout
    assert r.stdout.index(keep) < r.stdout.index(extra)  # the largest change first
    assert "live +2.00 MiB, cached 0 B  %s (new)" % extra in r.stdout
    d = json.loads(cli("diff", "--format", "json", tmp_path / "before.json", tmp_path / "after.json").stdout)
    assert d["schema"] == "tracepool.diff/1"
    by_where = {s["where"]: s for s in d["sites"]}
    assert by_where[keep]["live_change"] == 3 * MiB and by_where[keep]["status"] == "both"
    assert by_where[extra]["live_change"] == 2 * MiB and by_where[extra]["status"] == "new"
    assert d["totals"]["allocated_bytes"]["change"] == 5 * MiB
    # Reversed, the extra site is gone.
    back = json.loads(cli("diff", "--format", "json", tmp_path / "after.json", tmp_path / "before.json").stdout)
    assert {s["where"]: s["status"] for s in back["sites"]}[extra] == "gone"


def page_data(page):
    """The JSON a page draws (core/report/report_html.cpp embeds it, each '<' as \\u003c)."""
    start = page.index(">", page.index('id="tracepool-data"')) + 1
    return json.loads(page[start:page.index("</script>", start)])


def test_diff_as_html_is_a_page_of_the_change_and_both_reports(program, tmp_path):
    """As report and merge: --format html, or -o x.html, makes one self-contained page."""
    assert cli("run", "--no-torch", "-o", tmp_path / "before.json", program, "2").returncode == 0
    assert cli("run", "--no-torch", "-o", tmp_path / "after.json", program, "5", "extra").returncode == 0
    change = json.loads(cli("diff", "--format", "json", tmp_path / "before.json", tmp_path / "after.json").stdout)
    for args in (["--format", "html"], ["-o", tmp_path / "d.html"], ["--format", "html", "-o", tmp_path / "x.txt"]):
        r = cli("diff", *args, tmp_path / "before.json", tmp_path / "after.json")
        assert r.returncode == 0, r.stderr
        page = r.stdout if "-o" not in args else Path(args[-1]).read_text()
        assert page.startswith("<!DOCTYPE html>"), page[:200]
        assert "<title>tracepool diff: before.json -&gt; after.json</title>" in page
        assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
        data = page_data(page)
        assert {k: v for k, v in data.items() if k != "reports"} == change
        before, after = data["reports"]
        assert before["schema"] == after["schema"] == "tracepool.report/1"
        assert sum(s["bytes"] for s in after["leaks"]) - sum(s["bytes"] for s in before["leaks"]) == 5 * MiB


def test_a_merge_of_one_report_says_one_report(program, tmp_path):
    assert cli("run", "--no-torch", "-o", tmp_path / "one.json", program, "1").returncode == 0
    r = cli("merge", tmp_path / "one.json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("== tracepool merge: 1 report\n"), r.stdout
    r = cli("merge", tmp_path / "one.json", tmp_path / "one.json")
    assert r.stdout.startswith("== tracepool merge: 2 reports\n"), r.stdout


@pytest.mark.parametrize("command", ["merge", "diff"])
def test_a_file_that_is_not_a_report_is_one_line_and_status_2(command, program, tmp_path):
    assert cli("run", "--no-torch", "-o", tmp_path / "good.json", program, "1").returncode == 0
    bad = json.loads((tmp_path / "good.json").read_text())
    bad["leaks"][0]["bytes"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    (tmp_path / "text.json").write_text("not json")
    for bad, says in (("bad.json", "bad.json: leaks[0]"), ("text.json", "is not a tracepool report"),
                      ("missing.json", "cannot read")):
        r = cli(command, tmp_path / "good.json", tmp_path / bad)
        assert r.returncode == 2, r
        assert r.stdout == ""
        assert r.stderr.startswith("tracepool: %s: " % command) and says in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1, r.stderr
    assert cli(command).returncode == 2  # no files: argparse's usage error
