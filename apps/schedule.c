/* schedule — simulate a parallel-training schedule and draw it, or balance a pipeline
 * with LayerPipe (cli/schedule_cli.c).
 *
 *   schedule --scheme lpp --stages 8 --microbatches 16 --groups 2 --per-group 4 --svg out.svg
 *   schedule --scheme gpipe --model vgg11 --workers 4
 *   schedule --layerpipe profile.csv --processors 3
 *   schedule --scheme zb-h1 --stages 4 --microbatches 8 --actions-out zb.csv
 *   schedule --scheme custom --actions zb.csv
 *
 * The last stdout line is one JSON object. */
#include "cli/schedule_cli.h"

int main(int argc, char **argv) { return sp_schedule_main(argc, argv); }
