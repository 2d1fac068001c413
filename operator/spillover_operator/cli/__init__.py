"""spilloverctl: the kill switch and status view for SpilloverPolicy (see docs/spilloverctl.md)."""
