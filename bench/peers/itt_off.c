/* oneCCL's static CPU library (PyPI's oneccl-devel) calls Intel's tracing
 * API (ittnotify) through these pointers, each call guarded by a null
 * check; a tracing collector sets them, and none is loaded here. PyPI
 * carries no ittnotify library to link, so they are defined here, null. */
void *__itt_domain_create_ptr__3_0, *__itt_event_create_ptr__3_0, *__itt_event_end_ptr__3_0,
    *__itt_event_start_ptr__3_0, *__itt_metadata_add_ptr__3_0, *__itt_string_handle_create_ptr__3_0,
    *__itt_task_begin_ptr__3_0, *__itt_task_end_ptr__3_0, *__itt_thread_set_name_ptr__3_0;
