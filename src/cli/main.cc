// `space`: the command-line client of spaced. Everything is in space::cli (src/cli).
#include "cli/commands.h"

int main(int argc, char** argv) { return space::cli::main(argc, argv); }
