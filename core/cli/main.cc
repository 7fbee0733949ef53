#include "cli/app.h"

int main(int argc, char** argv) { return wam::cli::run_cli(argc, argv); }
