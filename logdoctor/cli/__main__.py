"""`python -m logdoctor.cli`."""
from logdoctor.cli.main import main

main()
