"""The Kafka client's own log lines, kept out of a command's output.

confluent-kafka hands librdkafka's log lines to the client's ``logger`` setting, which is the
``cutover.router`` logger (router.base.kafka_io). A worker prints them; a command must not: a
refused login would otherwise print three raw ``FAIL|rdkafka#consumer-1| ... SASL
authentication error`` lines before the one sentence that says what to fix. The lines are
recognised by the form confluent-kafka logs them in (``"%s [%s] %s"``: facility, client name,
text), kept (the last :data:`KEPT`), and printed only with ``cutover -v``. Everything else the
libraries log goes on as before.
"""

from __future__ import annotations

import logging
import sys
from collections import deque

KEPT = 200
_CLIENT_LOGGER = "cutover.router"
_CLIENT_FORMAT = "%s [%s] %s"


class ClientLogFilter(logging.Filter):
    """Drops the client's own lines from a logger (keeping the last ones); passes the rest."""

    def __init__(self, echo: bool = False) -> None:
        super().__init__()
        self.echo = echo
        self.kept: deque[str] = deque(maxlen=KEPT)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != _CLIENT_FORMAT or not isinstance(record.args, tuple) \
                or len(record.args) != 3:
            return True
        line = f"kafka client {logging.getLevelName(record.levelno)}: {record.getMessage()}"
        self.kept.append(line)
        if self.echo:
            print(line, file=sys.stderr)
        return False


def keep_client_logs_out(echo: bool = False) -> ClientLogFilter:
    """Install the filter on the client logger (once; ``echo`` updated on a second call)."""
    logger = logging.getLogger(_CLIENT_LOGGER)
    for f in logger.filters:
        if isinstance(f, ClientLogFilter):
            f.echo = echo
            return f
    f = ClientLogFilter(echo)
    logger.addFilter(f)
    return f
