"""``instinct completion SHELL``: print click's completion script for the shell."""

from __future__ import annotations

import click

from instinct_serve.cli.common import choice


@click.command()
@click.argument("shell", type=choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    bash:  eval "$(instinct completion bash)"    (add to ~/.bashrc)
    zsh:   eval "$(instinct completion zsh)"     (add to ~/.zshrc)
    fish:  instinct completion fish > ~/.config/fish/completions/instinct.fish
    """
    from click.shell_completion import get_completion_class

    from instinct_serve.cli.main import _build_group

    cls = get_completion_class(shell)
    assert cls is not None  # click ships all three
    comp = cls(_build_group(), {}, "instinct", "_INSTINCT_COMPLETE")
    click.echo(comp.source())
