"""The audit log shared by several processes (instances of one home behind a proxy): the
process-level part of tests/test_audit.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_audit import configure, records
from tfunnel.observe.audit import AuditLog

WRITER = """
import sys
from pathlib import Path
from tfunnel.observe.audit import AuditLog
audit = AuditLog(Path(sys.argv[1]))
for seq in range(int(sys.argv[3])):
    audit.record("tool", name="echo", writer=sys.argv[2], seq=seq)
"""


def test_instances_sharing_the_log_lose_no_record_when_they_rotate(tmp_path: Path) -> None:
    """Several gateways of one home (instances behind a proxy) append to one audit log and rotate
    it: every record of every writer is in the live file or a backup, exactly once."""
    configure(tmp_path, {"enabled": True, "maxBytes": 5000, "backups": 100})
    writers, each = 4, 300
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(w), str(each)],
                              stderr=subprocess.PIPE) for w in range(writers)]
    errors = [p.communicate(timeout=60)[1].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    assert not any("audit log write failed" in e for e in errors), errors
    live = AuditLog(tmp_path).path
    files = live.parent.glob(live.name + "*")
    seen = sorted((r["writer"], r["seq"]) for path in files for r in records(path))
    assert seen == sorted((str(w), s) for w in range(writers) for s in range(each))
