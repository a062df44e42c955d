"""Signal dispositions for the children a test starts and then signals."""

from __future__ import annotations

import signal


def default_sighup() -> None:
    """A child's SIGHUP back to its default action (the process ends). A suite started under nohup
    ignores SIGHUP, and every child inherits an ignored signal across exec, so a test that sends SIGHUP
    to a child without handlers of its own would otherwise see it keep running."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
