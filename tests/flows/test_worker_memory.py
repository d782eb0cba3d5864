"""A Ray worker hands back what a task freed: its RSS after a task is its working set, not the task's peak.

Run in a fresh interpreter per case, so the heap under test holds only what the case allocated. The case
leaves glibc's heap the way a batch does: many medium-sized objects (above pymalloc's 512-byte limit, so from
malloc) freed, a few of them kept (what the task returns or caches), scattered through the heap so that glibc
cannot give the space back by shrinking its top.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlmforge.flows.runtime.embedded import _MALLOC_TRIM

CASE = """
import json, sys
from vlmforge.flows.runtime.embedded import returns_freed_memory

def rss_mb():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmRSS:")).split()[1]) / 1024

kept = []

def task():
    garbage = [bytearray(2000) for _ in range(100_000)]  # ~200 MB from malloc
    kept.extend(garbage[::50])  # one in fifty survives the task
    del garbage
    return "done"

body = returns_freed_memory(task) if sys.argv[1] == "wrapped" else task
before = rss_mb()
assert body() == "done"
print(json.dumps({"grown_mb": rss_mb() - before}))
"""


def _grown_mb(mode: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", CASE, mode], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["grown_mb"])


@pytest.mark.skipif(_MALLOC_TRIM is None, reason="this libc has no malloc_trim (not glibc)")
def test_a_task_body_returns_what_it_freed_to_the_system() -> None:
    plain = _grown_mb("plain")
    wrapped = _grown_mb("wrapped")
    assert plain > 150, f"the case did not leave freed memory in the heap ({plain:.0f} MB): it tests nothing"
    assert wrapped < 30, f"a wrapped task still holds {wrapped:.0f} MB it freed (plain: {plain:.0f} MB)"


def test_the_wrapper_keeps_the_task_result_errors_and_signature() -> None:
    import inspect

    from vlmforge.flows.runtime.embedded import returns_freed_memory

    def task(entry: str, index: int = 0) -> str:
        if index < 0:
            raise ValueError("negative index")
        return f"{entry}/{index}"

    body = returns_freed_memory(task)
    assert body("s", index=3) == "s/3"
    with pytest.raises(ValueError, match="negative index"):
        body("s", index=-1)
    # Prefect names task runs from the parameters it reads off the signature
    assert inspect.signature(body) == inspect.signature(task)


def test_every_task_a_ray_worker_runs_hands_back_its_memory() -> None:
    from prefect import Task

    from vlmforge.flows import pipeline, stage_tasks
    from vlmforge.flows.runtime.embedded import returns_freed_memory

    wrapper_code = returns_freed_memory(lambda: None).__code__
    tasks = [value for value in vars(stage_tasks).values() if isinstance(value, Task)]
    assert {t.name for t in tasks} == {"build-batch", "gate", "publish", "quality-docs", "validate"}
    for t in tasks:
        assert t.fn.__code__ is wrapper_code, f"{t.name} runs without returns_freed_memory"
    # the flow submits these very tasks
    assert not [
        name for name, value in vars(pipeline).items() if isinstance(value, Task) and value not in tasks
    ]


CATALOG_CASE = """
import json, sys
from pathlib import Path
from vlmforge.flows.runtime.embedded import hand_back_freed_memory
from vlmforge.tasks.catalog.release_catalog import catalog_release

def rss_mb():
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmRSS:")).split()[1]) / 1024

small, release = Path(sys.argv[2]), Path(sys.argv[3])
catalog_release(str(small), batch_lines=10_000, min_batches=2)  # the imports a first call makes
before = rss_mb()
catalog_release(str(release), batch_lines=10_000, min_batches=2)
if sys.argv[1] == "handed back":
    hand_back_freed_memory()
print(json.dumps({"grown_mb": rss_mb() - before}))
"""


@pytest.mark.skipif(_MALLOC_TRIM is None, reason="this libc has no malloc_trim (not glibc)")
@pytest.mark.slow  # a child process scanning a large release (7 s)
def test_the_driver_hands_back_what_the_catalog_scan_freed(tmp_path: Path) -> None:
    """The driver lives for the whole run: the buffers of its scan of every JSONL are not kept (the flow
    hands them back after the catalog stage)."""
    row = {"role": "user", "content": "a question of a few words " * 12}
    for name, rows in (("small", 10), ("release", 200_000)):
        subset = tmp_path / name / "texts"
        subset.mkdir(parents=True)
        (subset / "README.md").write_text("# texts\n\nText-only rows, license: CC-BY-4.0\n")
        with (subset / "texts.jsonl").open("w") as f:
            for i in range(rows):
                f.write(json.dumps({"id": f"t{i}", "messages": [row]}) + "\n")

    # glibc gives the top of its heap back by itself when the free space there passes a threshold, and
    # serves large buffers from mmap (returned at free): where the scan's buffers land decided whether
    # anything was left to hand back (0.7 MB in one run, over 5 MB in the next). Without those two
    # shortcuts the scan's freed heap stays, as it does in a driver whose heap is fragmented; malloc_trim
    # must return it.
    env = os.environ | {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}

    def grown(mode: str) -> float:
        cmd = [sys.executable, "-c", CATALOG_CASE, mode, str(tmp_path / "small"), str(tmp_path / "release")]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300, env=env).stdout
        return float(json.loads(out.strip().splitlines()[-1])["grown_mb"])

    kept, handed_back = grown("kept"), grown("handed back")
    assert kept > 5, f"the scan left only {kept:.1f} MB freed in the heap: the case tests nothing"
    assert handed_back < kept / 2, f"after the hand-back {handed_back:.1f} MB remain (without: {kept:.1f} MB)"


def test_the_driver_imports_neither_torch_nor_energon() -> None:
    """The driver imports the flow, and with it the stages' functions it calls itself (catalog, the
    metadataset): torch and megatron-energon (which imports torch) belong to the workers, ~0.2 GB that the
    driver would hold for the whole run (a publish module importing Energon at its top did that once)."""
    probe = (
        "import sys, json, vlmforge.flows.pipeline, vlmforge.flows.cli; "
        "print(json.dumps(sorted(m for m in ('torch', 'megatron.energon', 'great_expectations') "
        "if m in sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []
