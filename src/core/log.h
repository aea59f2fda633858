/* log.h - levelled logging to stderr; the level comes from HMOE_LOG=debug|info|warn|error|off. */
#ifndef HM_CORE_LOG_H
#define HM_CORE_LOG_H

#include <stdio.h>
#include "core/status.h"

/* hm_log_level, hm_log_set_level, hm_log_get_level and hm_log are public (hmoe.h). */

/* Parses "debug", "info", "warn"/"warning", "error", "off"/"none" (case-insensitive). */
hm_status hm_log_parse_level(const char *s, hm_log_level *out);
const char *hm_log_level_name(hm_log_level level);

/* Reads HMOE_LOG again (done automatically on first use). An invalid value keeps the default
 * (warn) and logs one warning naming the accepted values. */
void hm_log_init_from_env(void);
/* Destination of log lines (default stderr). Tests point it at a temporary file. */
void hm_log_set_stream(FILE *f);

#define HM_DEBUG(...) hm_log(HM_LOG_DEBUG, __VA_ARGS__)
#define HM_INFO(...)  hm_log(HM_LOG_INFO, __VA_ARGS__)
#define HM_WARN(...)  hm_log(HM_LOG_WARN, __VA_ARGS__)
#define HM_ERROR(...) hm_log(HM_LOG_ERROR, __VA_ARGS__)

#endif
