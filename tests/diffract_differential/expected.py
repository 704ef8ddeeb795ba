"""The expected status of every differential snippet: the one place to edit them.

Each value is ``"same"`` or ``"documented: d-<anchor>"`` (an anchor of
docs/migrating-from-diffract.md that names the difference). Until a point of issue 26 is
resolved its snippets carry their measured status (``"differs"``, ``"raises-in-ours-only"``,
``"raises-in-Diffract-only"``): test_differential.py checks that they still measure so, and
``test_no_snippet_differs_undocumented`` fails while any remains. The comment after an entry is
the difference measured when it was written (``scripts/diffract_differential.py
--write-expected`` rewrites the entries that are not yet ``same`` / ``documented``).
"""

EXPECTED: dict[str, str] = {
    # point 1
    "p01.sequential_names": "differs",  # names: ours ["0.bias", "0.weight", "2.bias", "2.weight"], Diffract ["0", "2"]
    "p01.filter_module_path": "differs",  # scope names: ours [], Diffract ["0"]; written: ours [], Diffract ["0"]
    "p01.filter_regex_module": "differs",  # scope names: ours ["0.bias", "0.weight"], Diffract ["0"]
    "p01.filter_two_modules": "differs",  # frob.0: ours "<absent>", Diffract 6.513241704779795; frob.2: ours "<absent>", Diffract 4.504970348738999
    "p01.state_dict_names": "differs",  # names: ours ["0.bias", "0.weight", "2.bias", "2.weight"], Diffract ["0.weight", "2.weight"]
    "p01.frob_by_name": "differs",  # frob_norm.mlp/0: ours "<absent>", Diffract 6.513241704779795; frob_norm.mlp/0.weight: ours 6.513241361605944, Diffract "<absent>"; frob_norm.mlp/2: ours "<ab...
    "p01.weight_name_filter": "differs",  # scope names: ours ["0.weight"], Diffract []
    "p01.conv_embedding_norm": "differs",  # names: ours ["conv.bias", "conv.weight", "emb.weight", "fc.bias", "fc.weight", ..., Diffract ["fc"]; types: ours ["BIAS", "CONV", "DENSE", "EMBEDDING", "NORM...
    # point 2
    "p02.list_after_subscope": "differs",  # names: ours ["a/head", "a/layer.0.weight", "a/layer.1.weight", "a/layer.2.weight"], Diffract ["a/head", "a/layer.0.weight", "a/layer.1.weight", "a/layer.2.we...
    "p02.pandas_after_subscope": "differs",  # missing: ours 0, Diffract 3; rows: ours 4, Diffract 7
    "p02.polars_after_subscope": "differs",  # nulls: ours 0, Diffract 3; rows: ours 4, Diffract 7
    "p02.list_not_computed": "differs",  # rows: ours 0, Diffract 7
    "p02.pandas_not_computed": "differs",  # has column: ours true, Diffract false; rows: ours 0, Diffract 7
    "p02.dict_after_subscope": "same",
    "p02.export_metrics_source": "differs",  # rows: ours 2, Diffract 7
    "p02.two_fields_one_computed": "same",
    # point 3
    "p03.weights_svals": "differs",  # weights_svals.k/w[0]: ours 5.0, Diffract 1.0000000000000002; weights_svals.k/w[1]: ours 2.9999998410542763, Diffract 2.0000000000000004; weights_svals.k/w[2]...
    "p03.weights_svals_first_last": "differs",  # first is max: ours true, Diffract false; last is min: ours true, Diffract false
    "p03.esd_order": "same",
    "p03.lsvs_alignment": "differs",  # first column is top: ours true, Diffract false
    "p03.l_r_agreement": "differs",  # l_agreement[0].value[0]: ours 0.06602035470750355, Diffract 0.06308154224922048; l_agreement[0].value[1]: ours 0.6144848464645869, Diffract 0.165324881011541...
    "p03.max_agreement": "differs",  # max_l_agreement[0].value[0]: ours 0.6465506434512226, Diffract 0.5039321531633272; max_l_agreement[0].value[1]: ours 0.6144848464645869, Diffract 0.646550643...
    "p03.avg_agreement": "differs",  # avg_max_l_agreement[0].value: ours 0.5802296815770064, Diffract 0.586492242795119; avg_max_l_agreement[1].value: ours 0.5510473290990295, Diffract 0.55484389...
    "p03.agreement_unpaired_name": "differs",  # apply: ours "ok", Diffract {"raises": "SessionError"}; params: ours [["head"], ["layer.0.weight"], ["layer.1.weight"]], Diffract []
    "p03.weights_rand_svals_order": "differs",  # ascending: ours false, Diffract true; descending: ours true, Diffract false
    # point 4
    "p04.param_norm": "differs",  # param_norm[0].value: ours 19.584294034319058, Diffract 383.5445728226649; param_norm[1].value: ours 18.40979038857247, Diffract 338.9203821511753
    "p04.hard_rank_gauss48": "same",
    "p04.hard_rank_gauss48_seeds": "differs",  # hard_rank.g/w02: ours 48, Diffract 47; hard_rank.g/w03: ours 48, Diffract 47; hard_rank.g/w06: ours 48, Diffract 47 (+1 more)
    "p04.hard_rank_deficient": "same",
    "p04.basic_norms": "same",
    "p04.log_norms": "same",
    "p04.mp_fit": "differs",  # mp_esd_max.m/gauss: ours 0.02912704362858358, Diffract 0.02542379231553269
    "p04.mp_presence": "differs",  # mp_concentration.m/gauss: ours 0.0, Diffract 1.0; mp_concentration.m/heavy: ours 0.075, Diffract 0.925; mp_ks.m/gauss: ours 0.052418268730418105, Diffract 0....
    "p04.mp_spikes_soft_rank": "differs",  # mp_num_spikes.m/gauss: ours 0, Diffract 0.0; mp_num_spikes.m/heavy: ours 3, Diffract 3.0; mp_soft_rank.m/gauss: ours 1.1456608544897673, Diffract 0.999999999...
    "p04.tw_esd_bound": "differs",  # tw_esd_bound.m/gauss: ours 0.030117529188608598, Diffract 0.03189141136764765; tw_esd_bound.m/heavy: ours 0.16243167146660273, Diffract 0.1719986796206154; t...
    "p04.num_spikes_types": "differs",  # types.mp_num_spikes: ours "int", Diffract "float"; types.tw_num_spikes: ours "int", Diffract "float"
    "p04.randomized_seed42": "differs",  # esd_rand_max.g/w: ours 4.195800994629001, Diffract 4.192695335690481; esd_rand_min.g/w: ours 8.507654243555055e-05, Diffract 0.00015064852036188788; max_weig...
    "p04.weights_rand_values": "differs",  # first row[0]: ours 0.09723401287929019, Diffract -1.4012585088328537; first row[1]: ours 0.29321371158095555, Diffract -0.30167632703614505; first row[2]: ou...
    "p04.tpl_fit": "differs",  # tpl_alpha.m/gauss: ours -5.705133912796039, Diffract 1.0000000000030715; tpl_alpha.m/heavy: ours 2.234190758707027, Diffract 2.234215746399496; tpl_alpha_nor...
    "p04.tpl_alpha_positive": "differs",  # all positive: ours false, Diffract true
    "p04.pl_alpha": "same",
    "p04.expon_lambda": "differs",  # expon_ks.m/heavy: ours 0.33140759429511846, Diffract 0.33140864452275476; expon_lambda.m/heavy: ours 5.24065565168751, Diffract 5.2406739894450585
    "p04.esd_extremes": "same",
    # point 5
    "p05.head_scope_log_norm": "differs",  # contexts: ours [], Diffract [["a"], ["b"]]; records: ours 0, Diffract 2
    "p05.model_scope_log_norm": "same",
    "p05.scope_apply_then_session": "differs",  # session: ours [], Diffract [{"context_models": ["a"], "context_params": ["head"], "field": "lo...
    "p05.pair_agreement_from_scope": "same",
    "p05.export_all_contextual_scope": "same",
    # point 6
    "p06.failing_kernel_apply": "raises-in-Diffract-only",  # apply: ours "returned", Diffract {"raises": "SessionError"}
    "p06.failing_kernel_stored": "differs",  # held: ours ["a/layer.0.weight", "a/layer.1.weight", "a/layer.2.weight", "b/lay..., Diffract []
    "p06.failing_builtin_nan_svd": "same",
    "p06.nan_slice_frob": "differs",  # frob.bad: ours "<absent>", Diffract "NaN"
    "p06.nan_slice_rows": "differs",  # rows: ours ["good"], Diffract ["bad", "good"]
    "p06.nan_slice_weights_std": "differs",  # std.bad: ours "<absent>", Diffract "NaN"
    # point 7
    "p07.two_default_sessions": "differs",  # s1 models: ours ["one", "two"], Diffract ["one"]; s2 models: ours ["one", "two"], Diffract ["two"]
    "p07.two_local_sessions": "same",
    "p07.helper_rerun": "differs",  # second: ours ["one", "two"], Diffract ["two"]
    "p07.with_blocks_sequential": "same",
    # point 8
    "p08.add_twice_no_id": "differs",  # models: ours 1, Diffract 2; second: ours {"raises": "ModelAlreadyExistsError"}, Diffract "ok"
    "p08.add_two_different_no_id": "same",
    "p08.model_id_empty": "differs",  # add: ours {"raises": "InvalidIdentifierError"}, Diffract "ok"; models: ours 0, Diffract 1
    "p08.model_id_zero": "differs",  # add: ours {"raises": "InvalidIdentifierError"}, Diffract "ok"; models: ours 0, Diffract 1
    "p08.model_id_taken": "same",
    "p08.auto_id_shape": "same",
    # point 9
    "p09.hard_rank_as_dict": "differs",  # as_dict: ours {"raises": "AttributeError"}, Diffract {"rtol": 0.001}; returned: ours "dict", Diffract "KernelConfig"
    "p09.allow_cuda": "differs",  # as_dict: ours null, Diffract {"allow_cuda": false}; returned: ours {"raises": "InvalidConfigurationError"}, Diffract "KernelConfig"
    "p09.tpl_fit_method_powerlaw": "differs",  # as_dict: ours null, Diffract {"fit_method": "powerlaw"}; returned: ours {"raises": "InvalidConfigurationError"}, Diffract "KernelConfig"
    "p09.expon_fit_method_diffract": "differs",  # as_dict: ours null, Diffract {"fit_method": "diffract"}; returned: ours {"raises": "InvalidConfigurationError"}, Diffract "KernelConfig"
    "p09.pl_fit_method_auto": "differs",  # as_dict: ours {"raises": "AttributeError"}, Diffract {"fit_method": "auto"}; returned: ours "dict", Diffract "KernelConfig"
    "p09.weights_rand_seed": "differs",  # as_dict: ours {"raises": "AttributeError"}, Diffract {"seed": 7}; returned: ours "dict", Diffract "KernelConfig"
    "p09.unknown_key": "same",
    "p09.unknown_kernel": "same",
    "p09.field_name_not_kernel": "differs",  # as_dict: ours {"raises": "AttributeError"}, Diffract null; returned: ours "dict", Diffract {"raises": "KernelNotFoundError"}
    "p09.hard_rank_configured_value": "differs",  # as_dict: ours {"raises": "AttributeError"}, Diffract {"rtol": 0.5}; hard_rank.g/w: ours 20, Diffract 11; returned: ours "dict", Diffract "KernelConfig"
    "p09.powerlaw_fit_then_apply": "differs",  # as_dict: ours null, Diffract {"fit_method": "powerlaw"}; returned: ours {"raises": "InvalidConfigurationError"}, Diffract "KernelConfig"
    # point 10
    "p10.available_fields": "same",
    "p10.export_weights_dict": "raises-in-ours-only",  # export: ours {"raises": "KernelNotFoundError"}, Diffract [{"weights": [[0.0, 0.1, 0.2], [0.3, 0.4, 0.5], [0.6, 0.7, 0.8], [0...
    "p10.export_weights_list": "raises-in-ours-only",  # export: ours {"raises": "KernelNotFoundError"}, Diffract [{"model_id": "m", "parameter_name": "w", "parameter_type": "DENSE"...
    "p10.export_weights_and_frob": "raises-in-ours-only",  # export: ours {"raises": "KernelNotFoundError"}, Diffract [{"frob_norm": 2.249444375840397, "model_id": "m", "parameter_name"...
    # point 11
    "p11.override_missing_name": "differs",  # add: ours {"raises": "SessionError"}, Diffract "ok"; names: ours [], Diffract ["a", "b"]
    "p11.override_present_and_missing": "differs",  # add: ours {"raises": "SessionError"}, Diffract "ok"; names: ours [], Diffract ["b", "first"]
    "p11.override_type_and_meta": "same",
    # point 12
    "p12.erase_in_name_scope": "differs",  # b left: ours [], Diffract ["layer.0.weight", "layer.1.weight"]; summary.affected: ours 3, Diffract 1
    "p12.erase_outside_model_scope": "differs",  # erase: ours {"affected": 1, "models": ["c"]}, Diffract {"raises": "ModelNotFoundError"}; models: ours ["a", "b"], Diffract ["a", "b", "c"]
    "p12.erase_all_in_scope": "same",
    "p12.erase_session": "same",
    # point 13
    "p13.apply_no_names": "differs",  # result: ours {"raises": "ValueError"}, Diffract [[], [], []]; warned: ours false, Diffract true
    "p13.apply_unknown": "same",
    "p13.apply_list_of_unknown": "differs",  # apply.raises: ours "SessionError", Diffract "KernelNotFoundError"
    "p13.apply_list_of_known": "differs",  # apply.raises: ours "SessionError", Diffract "KernelNotFoundError"
    "p13.apply_known_and_unknown": "same",
    "p13.apply_kernel_name": "same",
    "p13.apply_typo_hint": "same",
    "p13.apply_summary": "differs",  # parameter_fields: ours ["frob_norm", "spectral_norm", "spectrum_path", "stable_rank", "wei..., Diffract ["frob_norm", "l2_norm", "max_weights_sval", "stable_...
    # point 14
    "p14.masked": "differs",  # names: ours ["odd", "ok"], Diffract ["ok"]
    "p14.masked_alone_frob": "differs",  # add: ours "ok", Diffract {"raises": "SessionError"}; frob: ours [6.2163644940502145], Diffract "<absent>"
    "p14.complex": "differs",  # add: ours {"raises": "SessionError"}, Diffract "ok"; names: ours [], Diffract ["ok"]
    "p14.empty": "differs",  # add: ours {"raises": "SessionError"}, Diffract "ok"; names: ours [], Diffract ["ok"]
    "p14.one_d": "differs",  # names: ours ["odd", "ok"], Diffract ["ok"]
    "p14.single_element": "differs",  # names: ours ["odd", "ok"], Diffract ["ok"]
    "p14.int": "same",
    "p14.three_d": "differs",  # names: ours ["odd", "ok"], Diffract ["ok"]
    "p14.float16": "same",
    "p14.only_complex": "same",
    # point 15
    "p15.unknown_uid": "raises-in-Diffract-only",  # filter: ours 0, Diffract {"raises": "KeyError"}
    "p15.known_and_unknown_uid": "raises-in-Diffract-only",  # filter: ours 1, Diffract {"raises": "KeyError"}
    "p15.known_uid": "same",
    "p15.uid_as_string": "same",
    # point 16
    "p16.resolver": "raises-in-ours-only",  # resolver: ours {"raises": "ModuleNotFoundError"}, Diffract {"FieldSelector": true, "render_label": true, "resolve": true}
    "p16.session_context": "raises-in-ours-only",  # scope is SessionContext: ours {"raises": "ImportError"}, Diffract true
    "p16.compute_names": "differs",  # names.InconsistentWiring: ours false, Diffract true; names.InvalidConfigurationError: ours true, Diffract false; names.KernelConfig: ours false, Diffract tru...
    "p16.exception_tree": "raises-in-ours-only",  # subclass.InconsistentWiring: ours {"raises": "AttributeError"}, Diffract true; subclass.KernelExecutionError: ours {"raises": "AttributeError"}, Diffract true
    "p16.kernel_config": "raises-in-ours-only",  # config: ours {"raises": "ImportError"}, Diffract {"rtol": 0.001}
    "p16.parameter_type_intflag": "differs",  # DENSE: ours {"raises": "TypeError"}, Diffract 1; UNKNOWN: ours {"raises": "AttributeError"}, Diffract 0; intflag: ours false, Diffract true
    "p16.parameter_type_from_string": "same",
    "p16.session_errors": "same",
    "p16.execution_enums": "same",
    "p16.namespaces_module": "same",
    # point 17
    "p17.name_with_slash": "differs",  # add: ours "ok", Diffract {"raises": "InvalidIdentifierError"}; names: ours ["a/b"], Diffract []
    "p17.name_with_at": "differs",  # add: ours "ok", Diffract {"raises": "InvalidIdentifierError"}; names: ours ["a@b"], Diffract []
    "p17.name_with_comma": "differs",  # add: ours "ok", Diffract {"raises": "InvalidIdentifierError"}; names: ours ["a,b"], Diffract []
    "p17.name_with_bracket": "differs",  # add: ours "ok", Diffract {"raises": "InvalidIdentifierError"}; names: ours ["a[b"], Diffract []
    "p17.name_with_closing_bracket": "differs",  # add: ours "ok", Diffract {"raises": "InvalidIdentifierError"}; names: ours ["a]b"], Diffract []
    "p17.name_with_space": "differs",  # add: ours "ok", Diffract {"raises": "InvalidIdentifierError"}; names: ours ["a b"], Diffract []
    "p17.filter_comma_name": "differs",  # scope: ours ["a,b"], Diffract []
    "p17.model_id_slash": "same",
    "p17.rename_bad_id": "same",
    "p17.ingest_aggregate_bad_context": "same",
    # point 18
    "p18.rename_then_aggregates": "differs",  # aggregates: ours [{"context_models": ["b"], "context_params": ["head", "layer.0.weig..., Diffract [{"context_models": ["b"], "context_params": ["head", "laye...
    "p18.rename_then_apply_summary": "differs",  # in_model_fields: ours [], Diffract ["log_norm"]
    "p18.erase_summary_fields": "same",
    "p18.erase_dependent_fields": "differs",  # fields: ours ["weights_svals"], Diffract ["effective_rank", "esd", "esd_max", "esd_min", "expon_concentratio...
    "p18.erase_all_fields": "same",
    "p18.greater_lower_dim": "same",
    "p18.list_key_order": "differs",  # keys[5]: ours "stable_rank", Diffract "frob_norm"; keys[6]: ours "frob_norm", Diffract "stable_rank"
    "p18.meta_keys": "differs",  # meta keys: ours ["meta_dtype", "meta_in_model_idx"], Diffract ["meta_in_model_idx", "meta_numpy_dtype", "meta_original_model_id"]
    "p18.pandas_column_order": "differs",  # columns[5]: ours "stable_rank", Diffract "frob_norm"; columns[6]: ours "frob_norm", Diffract "stable_rank"
    "p18.aggregate_record_keys": "same",
    "p18.parameters_list_keys": "same",
    # point 19
    "p19.flax_bound_module": "differs",  # add: ours {"raises": "SessionError"}, Diffract "ok"; names: ours [], Diffract ["Dense_0.kernel", "Dense_1.kernel"]
    "p19.flax_variables": "differs",  # names: ours ["params.Dense_0.bias", "params.Dense_0.kernel", "params.Dense_1.bi..., Diffract ["Dense_0.kernel", "Dense_1.kernel"]
    "p19.flax_bound_frob": "differs",  # match: ours false, Diffract true
    "p19.config_path_absent": "differs",  # models: ours "<absent>", Diffract ["m"]; session: ours {"raises": "SessionError"}, Diffract "opened"
    "p19.config_path_absent_profile": "raises-in-ours-only",  # session: ours {"raises": "SessionError"}, Diffract "opened"
    "p19.config_path_present": "same",
}
