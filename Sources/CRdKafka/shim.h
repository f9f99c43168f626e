#ifndef APN_WORKER_CRDKAFKA_SHIM_H
#define APN_WORKER_CRDKAFKA_SHIM_H
#include <librdkafka/rdkafka.h>

/* librdkafka.so exports the mock cluster API; not every packaging of librdkafka
 * installs rdkafka_mock.h. These declarations match librdkafka 2.0.2's
 * rdkafka_mock.h for the functions the embedded broker uses. */
typedef struct rd_kafka_mock_cluster_s rd_kafka_mock_cluster_t;
rd_kafka_mock_cluster_t *rd_kafka_mock_cluster_new(rd_kafka_t *rk, int broker_cnt);
void rd_kafka_mock_cluster_destroy(rd_kafka_mock_cluster_t *mcluster);
rd_kafka_t *rd_kafka_mock_cluster_handle(const rd_kafka_mock_cluster_t *mcluster);
const char *rd_kafka_mock_cluster_bootstraps(const rd_kafka_mock_cluster_t *mcluster);
rd_kafka_resp_err_t rd_kafka_mock_topic_create(rd_kafka_mock_cluster_t *mcluster,
                                               const char *topic,
                                               int partition_cnt,
                                               int replication_factor);
rd_kafka_resp_err_t rd_kafka_mock_broker_set_rtt(rd_kafka_mock_cluster_t *mcluster,
                                                 int32_t broker_id,
                                                 int rtt_ms);
void rd_kafka_mock_push_request_errors_array(rd_kafka_mock_cluster_t *mcluster,
                                             int16_t ApiKey,
                                             size_t cnt,
                                             const rd_kafka_resp_err_t *errors);
rd_kafka_resp_err_t rd_kafka_mock_broker_set_down(rd_kafka_mock_cluster_t *mcluster, int32_t broker_id);
rd_kafka_resp_err_t rd_kafka_mock_broker_set_up(rd_kafka_mock_cluster_t *mcluster, int32_t broker_id);
void rd_kafka_mock_clear_request_errors(rd_kafka_mock_cluster_t *mcluster, int16_t ApiKey);
rd_kafka_resp_err_t rd_kafka_mock_partition_set_leader(rd_kafka_mock_cluster_t *mcluster,
                                                       const char *topic,
                                                       int32_t partition,
                                                       int32_t broker_id);
rd_kafka_resp_err_t rd_kafka_mock_coordinator_set(rd_kafka_mock_cluster_t *mcluster,
                                                  const char *key_type,
                                                  const char *key,
                                                  int32_t broker_id);
rd_kafka_resp_err_t rd_kafka_mock_broker_push_request_error_rtts(rd_kafka_mock_cluster_t *mcluster,
                                                                 int32_t broker_id,
                                                                 int16_t ApiKey,
                                                                 size_t cnt,
                                                                 ...);

/* Swift cannot call a variadic C function: one (error, delay) tuple at a time. */
static inline rd_kafka_resp_err_t apn_mock_broker_push_request_error_rtt(rd_kafka_mock_cluster_t *mcluster,
                                                                         int32_t broker_id,
                                                                         int16_t ApiKey,
                                                                         rd_kafka_resp_err_t err,
                                                                         int rtt_ms) {
    return rd_kafka_mock_broker_push_request_error_rtts(mcluster, broker_id, ApiKey, 1, err, rtt_ms);
}
#endif
