#include "harness.h"
int main(void) { return t_report(); }
