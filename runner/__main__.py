from runner.surfaces.cli import main

main()
