from chaoslight._cli import entry

entry()
