from roofprof.cli import console_main

console_main()
