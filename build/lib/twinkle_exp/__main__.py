from twinkle_exp.cli import main

main()
