#ifndef APN_WORKER_CHIREDIS_SHIM_H
#define APN_WORKER_CHIREDIS_SHIM_H
#include <hiredis/hiredis.h>
#endif
