"""The zpar controller: hub (registration, heartbeats, notifications, task records) and the
relays it hosts (``python -m zpar.hub``)."""
