/* The demo's periodic summary on stdout: one line per pool, so that the
 * strategies can be compared without a browser. */
#ifndef GPUPOOL_DEMO_REPORT_H
#define GPUPOOL_DEMO_REPORT_H

#include <stdio.h>

#include "demo_workload.h"

void demo_report_header(FILE *f);
void demo_report_line(FILE *f, const demo_replica *r);

#endif
