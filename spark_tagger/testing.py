"""Moved: the order generator is ``cutover.cli.orders`` (where the demo lives), the topic
reader ``tests.topics``. This module stays only for the conformance grid's imports
(``tests/conformance``); delete it once they import ``cutover.cli.orders``."""

from cutover.cli.orders import EventSpec, Order, make_orders

__all__ = ["EventSpec", "Order", "make_orders"]
