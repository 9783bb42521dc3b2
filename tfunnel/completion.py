"""`tfunnel completion bash|zsh`: a shell completion script, generated from the argparse parser.

It completes the subcommands at every level (`tfunnel mcp add`), their options, the choices of
a positional (`tfunnel log on|off|...`) and of an option (`--mode gateway|reference`); anything
else falls back to file names. zsh runs the same functions through `bashcompinit`.
"""

from __future__ import annotations

import argparse
import shlex

_BODY = """\
_tfunnel_words() {
  case "$1" in
%(words)s
  esac
}
_tfunnel_values() {
  case "$1" in
%(choices)s
    *) return 1 ;;
  esac
}
_tfunnel_is_command() {
  case "$1" in
    %(commands)s) return 0 ;;
  esac
  return 1
}
_tfunnel() {
  local cur="${COMP_WORDS[COMP_CWORD]}" path="" next word i
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="${COMP_WORDS[i]}"
    [[ "$word" == -* ]] && continue
    next="${path:+$path }$word"
    _tfunnel_is_command "$next" && path="$next"
  done
  local values
  if ((COMP_CWORD > 1)) && values="$(_tfunnel_values "${COMP_WORDS[COMP_CWORD - 1]}")"; then
    COMPREPLY=($(compgen -W "$values" -- "$cur"))
    return
  fi
  COMPREPLY=($(compgen -W "$(_tfunnel_words "$path")" -- "$cur"))
}
complete -o default -F _tfunnel %(prog)s
"""
_EMPTY = '""'
_ZSH_PRELUDE = "autoload -U +X compinit && compinit\nautoload -U +X bashcompinit && bashcompinit\n"


def _walk(parser: argparse.ArgumentParser, path: str, out: dict[str, list[str]],
          values: dict[str, list[str]]) -> None:
    """`out[path]`: the words that may follow `path` (subcommands and positional choices, then
    options); `values[option]`: the choices an option takes."""
    words: list[str] = []
    options: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                words.append(name)
                _walk(sub, f"{path} {name}".strip(), out, values)
        elif action.option_strings:
            if action.help != argparse.SUPPRESS:
                options += [o for o in action.option_strings if o.startswith("--")]
            if action.choices is not None:
                for option in action.option_strings:
                    values[option] = [str(c) for c in action.choices]
        elif action.choices is not None:
            words += [str(c) for c in action.choices]
    out[path] = list(dict.fromkeys([*words, *options]))


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    table: dict[str, list[str]] = {}
    values: dict[str, list[str]] = {}
    _walk(parser, "", table, values)
    words = "\n".join(f"    {shlex.quote(path) if path else _EMPTY}) echo {shlex.quote(' '.join(found))} ;;"
                      for path, found in table.items())
    commands = "|".join(shlex.quote(path) for path in table if path) or "''"
    choices = "\n".join(f"    {shlex.quote(option)}) echo {shlex.quote(' '.join(found))} ;;"
                         for option, found in values.items())
    body = _BODY % {"words": words, "commands": commands, "choices": choices or "    --) ;;",
                    "prog": parser.prog}
    return (_ZSH_PRELUDE + body) if shell == "zsh" else body
