from blr_derive.cli import entry

entry()
