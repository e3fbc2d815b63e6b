"""The long tier: the harness's own end-to-end tests that each take many seconds of a two-core machine, left out
of CI's run (``-m "not long"``) so that CI keeps to its ten minutes, and run in full before a release and before an
issue is closed: ``pytest tests -n 2 -m long``. Each runs whole pytest sessions of the plugin in subprocesses (a
gate of several backends, a hang waited out, a wheel installed). A sixth of the zoo's mutation test
(tests/detection/: its first group of numerics defects and the interface group) and the wheel installed with the
example gated in a clone and out of it (tests/package/test_wheel_install.py) stay in CI's run.

One home for the tier: a test joins it here, by its node id (every parametrization of it), or one parametrization
of it by its whole node id, brackets included.
"""

LONG_TESTS: tuple[str, ...] = (
    # backends: Triton in the interpreter (about 30 ms a call), many dtypes, widths and loops per test; the CUDA
    # compile check's cache
    "tests/backends/test_triton_suites.py::test_triton_in_the_interpreter_passes_every_rule_under_smoke",
    "tests/backends/test_triton_backend.py::test_wide_row_path",
    "tests/backends/test_engine_adapters.py::test_a_run_naming_only_missing_engines_is_not_run",
    "tests/backends/test_triton_backend.py::test_backward_loops_are_bitwise_native",
    "tests/backends/test_triton_backend.py::test_one_row_per_backward_tile",
    "tests/backends/test_triton_backend.py::test_compiled_op_is_bitwise_eager",
    "tests/backends/test_triton_backend.py::test_dx_invariant_and_dw_deterministic",
    "tests/backends/test_cuda_backend.py::"
    "test_the_compile_checks_cache_serves_a_unit_only_for_the_same_command_and_sources",
    # the package: the action's gate step (the wheel install, which runs the example in a clone and out of it,
    # stays in CI's run)
    "tests/package/test_action.py::test_the_gate_step_runs_and_gives_the_verdict_and_exit_status",
    "tests/package/test_wheel_install.py::test_kernels_of_every_shape_gate_from_the_wheel_and_their_replays_reproduce",
    # faults: hangs, deadlines and signals waited out; crashes under xdist
    "tests/faults/test_adversarial.py::test_runs_that_wait_out_a_hang_or_a_deadline",
    "tests/faults/test_adversarial.py::test_a_segfault_under_xdist_is_the_backends_verdict_and_the_run_goes_to_its_end",
    "tests/faults/test_adversarial.py::test_sigterm_writes_an_incomplete_report_and_exits_nonzero",
    "tests/faults/test_adversarial.py::test_global_state_leaks_fail_their_rule_and_spare_later_backends",
    "tests/faults/test_faults.py::test_out_of_memory_that_passes_is_tried_again_and_a_correct_kernel_passes",
    "tests/faults/test_faults.py::test_out_of_memory_fails_the_kernel_that_asked_and_the_run_goes_on",
    "tests/faults/test_faults.py::test_a_first_call_out_of_memory_is_made_again_in_a_fresh_process",
    "tests/faults/test_adversarial.py::test_a_state_that_cannot_be_put_back_ends_its_process_and_spares_the_others",
    "tests/faults/test_adversarial.py::test_a_segfault_leaves_an_incomplete_report_naming_the_test",
    # the plugin's supervisor and controller: whole runs ended by deadlines, exit hooks and signals
    "tests/plugin/test_supervisor.py::test_a_run_that_outlives_its_deadline_is_ended_by_its_supervisor",
    "tests/plugin/test_supervisor.py::test_an_exit_hook_cannot_turn_a_fail_into_status_0",
    "tests/plugin/test_supervisor.py::test_a_thread_a_kernel_leaves_running_does_not_hang_the_run_after_its_verdict",
    "tests/plugin/test_supervisor.py::test_a_signal_to_the_process_group_ends_the_run_with_its_report",
    "tests/plugin/test_supervisor.py::test_an_exit_at_import_is_incomplete_and_replaces_the_stale_report",
    "tests/plugin/test_controller.py::test_workers_start_before_the_controller_imports_torch",
    "tests/plugin/test_supervisor.py::test_a_report_that_could_not_be_written_never_ends_in_status_0",
    "tests/plugin/test_supervisor.py::test_a_supervisor_killed_takes_its_run_down_with_an_incomplete_report",
    "tests/plugin/test_supervisor.py::test_a_pytest_run_inside_the_run_does_not_answer_for_it",
    "tests/plugin/test_coexistence.py::test_workers_from_the_file_become_xdist_workers_of_a_conformance_run",
    "tests/plugin/test_plugin.py::test_no_shrink_reports_the_failing_case_as_drawn_and_says_so",
    "tests/plugin/test_plugin.py::test_one_plus_weight_fails_naming_the_rule_with_a_replay_that_reproduces",
    "tests/plugin/test_forkserver.py::test_a_variable_read_at_start_up_changed_in_this_process_gets_a_new_server",
    "tests/plugin/test_forkserver.py::test_the_xdist_workers_of_a_forked_run_are_forks_with_the_runs_environment",
    "tests/plugin/test_supervisor.py::test_a_status_a_kernel_forged_is_not_taken_for_the_verdict",
    "tests/plugin/test_supervisor.py::test_an_exit_bound_before_the_harness_wrapped_it_is_never_status_0",
    "tests/plugin/test_ci_plugins.py::test_pytest_timeout_signal_method_ends_the_case_with_its_rule_and_replay",
    "tests/plugin/test_controller.py::test_report_paths_checked_by_every_process_at_once_never_read_as_unwritable",
    "tests/plugin/test_plugin.py::test_xdist_workers_send_their_records_to_the_report",
    "tests/running/test_torch_server.py::test_an_interrupted_wait_ends_the_child_with_it",
    "tests/plugin/test_plugin.py::test_hypothesis_statistics_and_events_are_shown",
    "tests/plugin/test_ci_plugins.py::test_pytest_timeout_thread_method_ends_the_process_and_the_report_names_the_case",
    # checking: whole gates of several backends; every suite test against a refusing kernel
    "tests/checking/test_refused.py::test_a_refusal_is_a_refusal_in_every_test_of_the_suites",
    "tests/checking/test_strict_profile.py::test_native_passes_the_strict_profile",
    "tests/checking/test_parity_gate.py::test_a_pair_in_different_orders_fails_with_bits_and_a_replay",
    "tests/checking/test_parity_gate.py::test_native_and_triton_are_at_parity_on_the_cpu",
    "tests/checking/test_fp8.py::test_native_and_a_vllm_order_kernel_pass_the_fp8_bounds",
    "tests/checking/test_known_failures.py::"
    "test_a_written_baseline_makes_the_same_run_pass_and_strict_mode_fails_a_stale_entry",
    "tests/checking/test_interface_gate.py::test_impolite_but_correct_kernel_passes_by_default_and_fails_only_when_strict",
    # running: adapters of every shape (the wheel test gates them too), servers replaced, compiled paths
    "tests/running/test_adapters_shapes.py::test_a_correct_kernel_of_each_shape_passes",
    "tests/running/test_adapters_shapes.py::test_a_planted_bug_in_each_shape_fails_with_its_rule_and_a_replay_that_reproduces",
    "tests/running/test_adapters.py::test_torch_functional_adapters_pass_the_gate_with_the_manifest",
    "tests/running/test_torch_server.py::test_a_server_that_died_is_replaced_and_a_new_interpreter_is_asked_for_by_name",
    "tests/running/test_child_imports.py::test_a_users_module_named_like_a_source_folder_is_the_users_in_the_first_call_process",
    "tests/running/test_execution_modes.py::test_a_compiled_path_that_differs_fails_the_default_gate",
    # detection: the zoo's mutation test beyond its first group (a sixth of the numerics defects each, about 25 s of
    # a worker)
    "tests/detection/test_detection.py::test_every_defect_is_caught_and_every_control_passes[zoo-1]",
    "tests/detection/test_detection.py::test_every_defect_is_caught_and_every_control_passes[zoo-2]",
    "tests/detection/test_detection.py::test_every_defect_is_caught_and_every_control_passes[zoo-3]",
    "tests/detection/test_detection.py::test_every_defect_is_caught_and_every_control_passes[zoo-4]",
    "tests/detection/test_detection.py::test_every_defect_is_caught_and_every_control_passes[zoo-5]",
    # reporting: the matrix's command line, a run under GitHub Actions
    "tests/reporting/test_matrix.py::test_the_command_line_runs_each_of_its_commands",
    "tests/reporting/test_ci_output.py::test_a_run_under_github_actions_writes_the_summary_annotations_and_junit_properties",
    # a run's two modes: each test below keeps its two-worker run (the mode CI and a gate use) in CI's run and its
    # one-process run here; then three narrower checks: the verbose listing of interface breaches (the default
    # listing stays in CI's run), a batch-size defect run through one suite file by path, and the CUDA compile
    # check's wait for a unit another process is compiling
    "tests/faults/test_adversarial.py::test_a_kernel_whose_bits_follow_the_thread_count_fails_execution_mode"
    "[one process]",
    "tests/faults/test_adversarial.py::test_an_unencodable_error_message_still_gets_every_report_written[one process]",
    "tests/faults/test_adversarial.py::test_an_exception_that_cannot_be_shown_fails_its_backend_and_the_run_goes_on"
    "[one process]",
    "tests/plugin/test_plugin.py::test_a_list_option_given_twice_keeps_both_values[one process]",
    "tests/plugin/test_plugin.py::test_batch_dependent_reduction_is_caught_by_axis_a",
    "tests/checking/test_interface_gate.py::test_verbose_lists_each_interface_breach",
    "tests/backends/test_cuda_backend.py::"
    "test_a_unit_another_process_is_compiling_is_waited_for_by_the_check_and_left_by_the_warm_up",
)


def is_long(nodeid: str) -> bool:
    """Is the test of this node id (``path::name`` or ``path::name[params]``) in the long tier?"""
    return nodeid in LONG_TESTS or nodeid.split("[", 1)[0] in LONG_TESTS
