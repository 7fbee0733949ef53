// The wam-pipeline command line as a library, so that a binary with extra stages linked in (see
// README "Writing a custom stage") gets the same commands.
#pragma once

namespace wam::cli {

// Parses argv, runs the chosen subcommand and returns the process exit status.
int run_cli(int argc, char** argv);

}  // namespace wam::cli
