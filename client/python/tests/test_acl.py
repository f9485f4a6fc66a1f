"""The pyACL surface over npud: a pyACL program runs with only the import changed, and the
vendor's error codes come back for the vendor's error situations."""

import threading
import time

from npud import acl

ACL_STREAM_FAST_LAUNCH, ACL_STREAM_FAST_SYNC, ACL_STREAM_DEVICE_USE_ONLY = 0x1, 0x2, 0x20
ACL_EVENT_TIME_LINE = 0x8


class CallbackSample:
    """Written the way pyACL samples are; only `from npud import acl` differs."""

    def __init__(self):
        self.device_id = 0
        self.context = None
        self.stream = None
        self.callback_run_flag = True
        self.results = []

    def init_resource(self):
        assert acl.init() == 0
        assert acl.rt.set_device(self.device_id) == 0
        self.context, ret = acl.rt.create_context(self.device_id)
        assert ret == 0
        self.stream, ret = acl.rt.create_stream()
        assert ret == 0

    def _process_callback(self, args_list):
        context, timeout = args_list
        assert acl.rt.set_context(context) == 0
        while self.callback_run_flag:
            acl.rt.process_report(timeout)

    def callback_func(self, user_data):
        self.results.append((user_data[0], threading.get_ident()))

    def run(self):
        tid, ret = acl.util.start_thread(self._process_callback, [self.context, 100])
        assert ret == 0
        assert acl.rt.subscribe_report(tid, self.stream) == 0
        for i in range(5):
            assert acl.rt.launch_callback(self.callback_func, [i], 1, self.stream) == 0
        assert acl.rt.synchronize_stream(self.stream) == 0
        assert acl.rt.unsubscribe_report(tid, self.stream) == 0
        self.callback_run_flag = False
        assert acl.util.stop_thread(tid) == 0
        return tid

    def release_resource(self):
        assert acl.rt.destroy_stream(self.stream) == 0
        assert acl.rt.destroy_context(self.context) == 0
        assert acl.rt.reset_device(self.device_id) == 0
        assert acl.finalize() == 0


def test_a_pyacl_callback_program_runs_unmodified(daemon):
    sample = CallbackSample()
    sample.init_resource()
    tid = sample.run()
    sample.release_resource()
    assert [r[0] for r in sample.results] == [0, 1, 2, 3, 4], "every callback ran once, in order"
    assert all(r[1] == tid for r in sample.results), "callbacks ran in the thread that called process_report"


def test_two_stream_ordering_with_stream_wait_event_and_elapsed_time(daemon):
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    s1, ret = acl.rt.create_stream_with_config(0, ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC)
    assert ret == 0
    s2, ret = acl.rt.create_stream()
    assert ret == 0
    start, ret = acl.rt.create_event()
    end, _ = acl.rt.create_event()
    assert ret == 0
    status, ret = acl.rt.query_event_status(end)
    assert (status, ret) == (0, 0), "never recorded: NOT_READY"
    assert acl.ext.delay(s1, 200_000) == 0  # queue behind busy work: device-exact timing
    assert acl.rt.record_event(start, s1) == 0
    assert acl.ext.delay(s1, 30_000) == 0
    assert acl.rt.record_event(end, s1) == 0
    assert acl.rt.stream_wait_event(s2, end) == 0
    status, ret = acl.rt.stream_query(s2)
    assert (status, ret) == (1, 0), "s2 waits for s1's event"
    assert acl.rt.synchronize_stream(s2) == 0
    status, _ = acl.rt.query_event_status(end)
    assert status == 1, "the record was reached before s2 could move on"
    ms, ret = acl.rt.event_elapsed_time(start, end)
    assert ret == 0 and abs(ms - 30.0) < 0.05, ms
    n, ret = acl.rt.get_stream_available_num()
    assert ret == 0 and n == 510 - 2
    for e in (start, end):
        assert acl.rt.destroy_event(e) == 0
    for s in (s1, s2):
        assert acl.rt.destroy_stream(s) == 0
    assert acl.rt.synchronize_device() == 0
    assert acl.finalize() == 0


def test_stream_zero_is_the_sessions_default_stream(daemon):
    acl.init()
    acl.rt.set_device(0)
    ev, _ = acl.rt.create_event()
    assert acl.ext.delay(0, 1000) == 0
    assert acl.rt.record_event(ev, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert acl.rt.query_event(ev) == (0, 0)


def test_exception_callbacks_carry_the_ids(daemon):
    from npud.acl._state import STATE
    from npud.v1 import admin_pb2

    acl.init()
    acl.rt.set_device(0)
    s, _ = acl.rt.create_stream()
    seen = []
    got = threading.Event()

    def on_exception(info):
        seen.append(
            (
                acl.rt.get_task_id_from_exception_info(info),
                acl.rt.get_stream_id_from_exception_info(info),
                acl.rt.get_device_id_from_exception_info(info),
                acl.rt.get_error_code_from_exception_info(info),
            )
        )
        got.set()

    assert acl.rt.set_exception_info_callback(on_exception) == 0
    time.sleep(0.2)
    session = STATE.session
    fault = admin_pb2.InjectFaultRequest(device=0, fail_task=admin_pb2.FailTask(stream=s, task=2, code=507015))
    session.call(session.admin.InjectFault, fault)
    for _ in range(3):
        acl.ext.delay(s, 1000)
    assert got.wait(10), "the exception callback ran"
    assert seen[0] == (2, s, 0, 507015)
    assert acl.rt.get_task_id_from_exception_info(None) == 0xFFFFFFFF


def test_vendor_error_codes_for_vendor_error_situations(daemon):
    assert acl.rt.create_stream()[1] == 100001, "before acl.init: ACL_ERROR_UNINITIALIZE"
    assert acl.init() == 0
    assert acl.init() == 100002, "ACL_ERROR_REPEAT_INITIALIZE"
    assert acl.rt.set_device(9) == 107001, "ACL_ERROR_RT_INVALID_DEVICEID"
    assert acl.rt.set_device(0) == 0
    s, _ = acl.rt.create_stream()
    assert acl.rt.launch_callback(lambda d: None, [], 0, s) == 107015, "no thread subscribed: ACL_ERROR_RT_STREAM_NO_CB_REG"
    assert acl.rt.subscribe_report(1, s) == 0
    assert acl.rt.subscribe_report(2, s) == 107011, "subscribed twice: ACL_ERROR_RT_STREAM_SUBSCRIBE"
    assert acl.rt.launch_callback(lambda d: None, [], 2, s) == 100000, "block type 2: ACL_ERROR_INVALID_PARAM"
    assert acl.rt.process_report(0) == 100000, "timeout 0: ACL_ERROR_INVALID_PARAM"
    assert acl.rt.process_report(-2) == 100000
    assert acl.rt.process_report(50) == 107012, "this thread subscribed nothing: ACL_ERROR_RT_THREAD_SUBSCRIBE"
    assert acl.rt.subscribe_report(threading.get_ident(), 0) == 0
    assert acl.rt.process_report(50) == 507012, "nothing due: ACL_ERROR_RT_REPORT_TIMEOUT"
    acl.ext.delay(s, 500_000)
    assert acl.rt.synchronize_stream_with_timeout(s, 20) == 507046, "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT"
    assert acl.rt.synchronize_stream_with_timeout(s, -2) == 107000, "ACL_ERROR_RT_PARAM_INVALID"
    ev, _ = acl.rt.create_event()
    acl.rt.record_event(ev, s)
    assert acl.rt.synchronize_event_with_timeout(ev, 20) == 507047, "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT"
    timeline, _ = acl.rt.create_event_with_flag(ACL_EVENT_TIME_LINE)
    assert acl.rt.stream_wait_event(s, timeline) == 100000, "no ACL_EVENT_SYNC: cannot be waited on"
    fresh, _ = acl.rt.create_event()
    _, ret = acl.rt.event_elapsed_time(fresh, ev)
    assert ret == 107000, "never recorded"
    _, ret = acl.rt.create_stream_with_config(0, ACL_STREAM_DEVICE_USE_ONLY | ACL_STREAM_FAST_LAUNCH)
    assert ret == 100000, "DEVICE_USE_ONLY is not OR-able"
    assert acl.rt.destroy_stream(0x7FFF_0000_0000_0001) == 107017, "unknown handle: ACL_ERROR_RT_INVALID_HANDLE"
    # Take the whole budget, then one more: the wait expires with ACL_ERROR_RT_NO_STREAM_RESOURCE.
    n, _ = acl.rt.get_stream_available_num()
    held = [acl.rt.create_stream() for _ in range(n)]
    assert all(ret == 0 for _, ret in held)
    assert acl.rt.create_stream() == (0, 207008)


def test_the_event_wait_status_and_ex_events_behave_as_the_seed_says(daemon):
    ACL_EVENT_SYNC = 0x1
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    available, ret = acl.rt.get_event_avail_num()
    assert ret == 0 and available > 0
    producer, ret = acl.rt.create_stream()
    consumer, _ = acl.rt.create_stream()
    event, ret = acl.rt.create_event_with_flag(ACL_EVENT_SYNC)
    assert ret == 0
    assert acl.rt.get_event_avail_num() == (available - 1, 0)
    # Never recorded: a wait on it ends at once.
    assert acl.rt.query_event_wait_status(event) == (acl.rt.ACL_EVENT_WAIT_STATUS_COMPLETE, 0)
    assert acl.ext.delay(producer, 2_000_000) == 0  # 2 s of work the record waits behind
    assert acl.rt.record_event(event, producer) == 0
    assert acl.rt.stream_wait_event(consumer, event) == 0
    assert acl.rt.query_event_wait_status(event) == (acl.rt.ACL_EVENT_WAIT_STATUS_NOT_READY, 0)
    assert acl.rt.synchronize_stream(consumer) == 0
    assert acl.rt.query_event_wait_status(event) == (acl.rt.ACL_EVENT_WAIT_STATUS_COMPLETE, 0)

    ex, ret = acl.rt.create_event_ex_with_flag(ACL_EVENT_SYNC)
    assert ret == 0
    assert acl.rt.record_event(ex, producer) == 0
    assert acl.rt.synchronize_event(ex) == 0
    assert acl.rt.stream_wait_event(consumer, ex) == 0
    # The seed: events made by the Ex call are refused by reset, query and wait-status.
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000
    assert acl.rt.reset_event(ex, producer) == ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert acl.rt.query_event(ex)[1] == ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert acl.rt.query_event_wait_status(ex)[1] == ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert acl.rt.query_event_status(ex) == (acl.rt.ACL_EVENT_RECORDED_STATUS_COMPLETE, 0)
    for e in (event, ex):
        assert acl.rt.destroy_event(e) == 0
    for s in (producer, consumer):
        assert acl.rt.destroy_stream(s) == 0
    assert acl.rt.reset_device(0) == 0


def test_a_null_event_is_an_invalid_parameter(daemon):
    ACL_ERROR_INVALID_PARAM = 100000
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    stream, _ = acl.rt.create_stream()
    event, _ = acl.rt.create_event()
    assert acl.rt.record_event(0, stream) == ACL_ERROR_INVALID_PARAM
    assert acl.rt.reset_event(0, stream) == ACL_ERROR_INVALID_PARAM
    assert acl.rt.stream_wait_event(stream, 0) == ACL_ERROR_INVALID_PARAM
    assert acl.rt.synchronize_event(0) == ACL_ERROR_INVALID_PARAM
    assert acl.rt.query_event_status(0)[1] == ACL_ERROR_INVALID_PARAM
    assert acl.rt.event_elapsed_time(0, event)[1] == ACL_ERROR_INVALID_PARAM
    assert acl.rt.destroy_event(0) == ACL_ERROR_INVALID_PARAM
    # Stream 0 is the default stream, not an error.
    assert acl.rt.record_event(event, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert acl.rt.destroy_event(event) == 0
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.reset_device(0) == 0


def test_one_exception_reaches_the_callback_once_whichever_path_brings_it(daemon):
    """The push listener and process_report in a subscribed thread both see the report;
    the vendor calls the exception callback once per exception."""
    from npud.acl._state import STATE
    from npud.v1 import admin_pb2

    acl.init()
    acl.rt.set_device(0)
    s, _ = acl.rt.create_stream()
    me = threading.get_ident()
    assert acl.rt.subscribe_report(me, s) == 0
    seen = []
    got = threading.Event()

    def on_exception(info):
        seen.append(acl.rt.get_task_id_from_exception_info(info))
        got.set()

    assert acl.rt.set_exception_info_callback(on_exception) == 0
    session = STATE.session
    fault = admin_pb2.InjectFaultRequest(device=0, fail_task=admin_pb2.FailTask(stream=s, task=1, code=507015))
    session.call(session.admin.InjectFault, fault)
    acl.ext.delay(s, 1000)
    assert got.wait(10), "the push listener delivered it"
    # The same report is still waiting for this subscribed thread.
    assert acl.rt.process_report(2000) in (0, 507012)  # delivered again, or already taken
    assert seen == [1], seen
    assert acl.rt.unsubscribe_report(me, s) == 0


def test_destroy_waits_for_the_streams_work_and_its_callbacks_still_arrive(daemon):
    """aclrtDestroyStream returns after the stream's tasks are done; a callback launched
    before the destroy is delivered exactly once. The Force variant returns at once."""
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    me = threading.get_ident()
    calls = []
    s, _ = acl.rt.create_stream()
    keeper, _ = acl.rt.create_stream()  # keeps this thread subscribed after s is gone
    assert acl.rt.subscribe_report(me, s) == 0
    assert acl.rt.subscribe_report(me, keeper) == 0
    assert acl.ext.delay(s, 1_500_000) == 0  # 1.5 s of work ahead of the callback
    assert acl.rt.launch_callback(calls.append, ["after the work"], acl.rt.ACL_CALLBACK_NO_BLOCK, s) == 0
    started = time.monotonic()
    assert acl.rt.destroy_stream(s) == 0
    assert time.monotonic() - started >= 1.4, "destroy returned before the work was done"
    assert acl.rt.process_report(5000) == 0
    assert calls == [["after the work"]]
    assert acl.rt.process_report(1000) == 507012, "delivered once"

    forced, _ = acl.rt.create_stream()
    assert acl.rt.subscribe_report(me, forced) == 0
    assert acl.ext.delay(forced, 3_000_000) == 0
    assert acl.rt.launch_callback(calls.append, ["forced"], acl.rt.ACL_CALLBACK_NO_BLOCK, forced) == 0
    started = time.monotonic()
    assert acl.rt.destroy_stream_force(forced) == 0
    assert time.monotonic() - started < 2.5, "the Force variant does not wait for the work"
    # The work still runs, and the callback enqueued before the destroy still arrives.
    assert acl.rt.process_report(10000) == 0
    assert calls == [["after the work"], ["forced"]]


def test_get_recent_err_msg_says_why_the_last_calls_failed_and_forgets(daemon):
    """aclGetRecentErrMsg: the calling thread's failed calls, newest first, then cleared;
    None when there is nothing to tell."""
    from npud import acl

    assert acl.init() == 0
    acl.get_recent_err_msg()  # what earlier tests in this thread left
    assert acl.get_recent_err_msg() is None
    assert acl.rt.set_device(0) == 0
    assert acl.rt.destroy_stream(12345) != 0
    _, ret = acl.rt.create_stream_with_config(0, 0)
    assert ret == 0
    assert acl.rt.synchronize_stream(67890) != 0
    msg = acl.get_recent_err_msg()
    assert msg.splitlines()[0].startswith("no such handle 67890"), msg
    assert msg.splitlines()[1].startswith("no such handle 12345"), msg
    assert acl.get_recent_err_msg() is None, "cleared once read"
    seen = []
    t = threading.Thread(target=lambda: seen.append((acl.rt.destroy_stream(111), acl.get_recent_err_msg())))
    t.start()
    t.join()
    assert seen[0][0] != 0 and "111" in seen[0][1]
    assert acl.get_recent_err_msg() is None, "another thread's failures are its own"
