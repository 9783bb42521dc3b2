"""`tfunnel state-key rotate`: a new shared `requestState` key (`toolfunnel.json` `stateKeyFile`).

The retiring key goes to `<file>.previous`, where every instance still accepts it for one expiry
window (`home/state_key.py`), so the MRTR retries of requests sealed before the rotation go on
working on every instance while new ones are sealed with the new key. Running instances pick the
new key up within a second; nothing restarts.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tfunnel.config.load import load_settings
from tfunnel.home.state_key import SETTING, StateKeyError, resolve, rotate
from tfunnel.protocol.mrtr import DEFAULT_TTL_S


def state_key_command(home: Path, action: str) -> int:
    value = load_settings(home).state_key_file
    if value is None:
        print(f"tfunnel state-key: toolfunnel.json sets no {SETTING}: each gateway seals with a key of "
              f"its own; set {SETTING} (e.g. \"state.key\") for instances behind one proxy", file=sys.stderr)
        return 1
    path = resolve(home, value)
    assert action == "rotate"
    try:
        rotate(path)
    except StateKeyError as exc:
        print(f"tfunnel state-key: {exc}", file=sys.stderr)
        return 1
    print(f"rotated {path}: new requestState tokens are sealed with the new key; the previous key "
          f"({path.name}.previous) still opens tokens for {DEFAULT_TTL_S:g} s")
    return 0
