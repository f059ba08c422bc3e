"""`python -m logdoctor`: the same entry point as the `logdoctor` script and `python -m logdoctor.cli`."""
from logdoctor.cli.main import main

main()
