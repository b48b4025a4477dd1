"""slurmlab's command line by area; lab/cli.py puts them together (`slurmlab --help` lists the
commands in the order these modules register them). Each command parses, calls the core, renders."""
