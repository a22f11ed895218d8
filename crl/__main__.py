from crl.cli import main

main()
