from stepscope.cli.main import run

run()
