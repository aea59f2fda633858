/* fake_cudart.c - a stand-in for the CUDA runtime's cudaLaunchHostFunc, for testing on machines
 * without a GPU the code that enqueues host functions on a stream (python/hmoe/_hmoe.c, through
 * HMOE_CUDART): each "stream" is a FIFO run in order by one thread, as CUDA runs a stream's host
 * functions; fake_stream_sync() waits until every queued function has run. */
#include <pthread.h>
#include <stdlib.h>

typedef struct item {
    void (*fn)(void *);
    void *data;
    struct item *next;
} item;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static item *head, *tail;
static int pending;
static int started, held;
static pthread_t worker;

/* while held, queued functions wait (as a stream busy with earlier work would) */
void fake_stream_hold(int on) {
    pthread_mutex_lock(&mu);
    held = on;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void *run(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (!head || held) pthread_cond_wait(&cv, &mu);
        item *it = head;
        head = it->next;
        if (!head) tail = NULL;
        pthread_mutex_unlock(&mu);
        it->fn(it->data);
        free(it);
        pthread_mutex_lock(&mu);
        pending--;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

int cudaLaunchHostFunc(void *stream, void (*fn)(void *), void *data) {
    (void)stream; /* one queue for every stream: stricter ordering than CUDA's */
    item *it = malloc(sizeof *it);
    if (!it) return 2; /* cudaErrorMemoryAllocation */
    it->fn = fn, it->data = data, it->next = NULL;
    pthread_mutex_lock(&mu);
    if (!started) {
        pthread_create(&worker, NULL, run, NULL);
        pthread_detach(worker);
        started = 1;
    }
    if (tail)
        tail->next = it;
    else
        head = it;
    tail = it;
    pending++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    return 0;
}

void fake_stream_sync(void) {
    pthread_mutex_lock(&mu);
    while (pending) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}
