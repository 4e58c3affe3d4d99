"""The dashboard: a live page served by the controller, and ``zpar top`` in a terminal.

``Dashboard`` (service.py) runs in a thread of the controller; ``state.py`` turns the hub's
events into what the page shows; ``app.py`` holds the routes; ``top.py`` is the terminal
view. docs/dashboard.md says what each panel shows.
"""

from __future__ import annotations

from .service import DEFAULT_ADDRESS, Dashboard, is_loopback, parse_address

__all__ = ["DEFAULT_ADDRESS", "Dashboard", "is_loopback", "parse_address"]
