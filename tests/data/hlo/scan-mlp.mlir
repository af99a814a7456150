module @jit_scan_mlp attributes {mhlo.num_partitions = 16 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=4, "tensor"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 4 : i64}, {name = "tensor", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<3x8x8xf32>, %arg1: tensor<8x8xf32>) -> (tensor<3x8x8xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{}, {"tensor"}, {}]>, <@mesh, [{"data"}, {}]>] out_shardings=[<@mesh, [{}, {"tensor"}, {}]>] manual_axes={"data", "tensor"} (%arg2: tensor<3x2x8xf32>, %arg3: tensor<2x8xf32>) {
      %c = stablehlo.constant dense<1> : tensor<ui32>
      %c_0 = stablehlo.constant dense<4> : tensor<ui32>
      %1 = stablehlo.partition_id : tensor<ui32>
      %2 = stablehlo.divide %1, %c : tensor<ui32>
      %3 = stablehlo.remainder %2, %c_0 : tensor<ui32>
      %4 = stablehlo.convert %3 : (tensor<ui32>) -> tensor<i32>
      %c_1 = stablehlo.constant dense<2> : tensor<i32>
      %5 = stablehlo.multiply %4, %c_1 : tensor<i32>
      %c_2 = stablehlo.constant dense<0> : tensor<i32>
      %6 = stablehlo.compare LT, %5, %c_2, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      %c_3 = stablehlo.constant dense<8> : tensor<i32>
      %7 = stablehlo.add %5, %c_3 : tensor<i32>
      %8 = stablehlo.select %6, %7, %5 : tensor<i1>, tensor<i32>
      %c_4 = stablehlo.constant dense<0> : tensor<i32>
      %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
      %cst_5 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %9 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<3x2x8xf32>
      %cst_6 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %10 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<3x2x2xf32>
      %cst_7 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %11 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<3x2x8xf32>
      %cst_8 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %12 = stablehlo.broadcast_in_dim %cst_8, dims = [] : (tensor<f32>) -> tensor<3x2x8xf32>
      %c_9 = stablehlo.constant dense<0> : tensor<i32>
      %13:10 = stablehlo.while(%iterArg = %arg2, %iterArg_13 = %cst, %iterArg_14 = %c_4, %iterArg_15 = %8, %iterArg_16 = %c_9, %iterArg_17 = %arg3, %iterArg_18 = %9, %iterArg_19 = %10, %iterArg_20 = %11, %iterArg_21 = %12) : tensor<3x2x8xf32>, tensor<f32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<3x2x8xf32>, tensor<3x2x2xf32>, tensor<3x2x8xf32>, tensor<3x2x8xf32>
      cond {
        %c_22 = stablehlo.constant dense<3> : tensor<i32>
        %18 = stablehlo.compare LT, %iterArg_16, %c_22, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %18 : tensor<i1>
      } do {
        %18 = func.call @dynamic_index_in_dim(%iterArg, %iterArg_16) : (tensor<3x2x8xf32>, tensor<i32>) -> tensor<2x8xf32>
        %19:5 = func.call @closed_call(%iterArg_13, %iterArg_14, %iterArg_15, %iterArg_17, %18) : (tensor<f32>, tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x2xf32>, tensor<2x8xf32>, tensor<2x8xf32>)
        %20 = func.call @dynamic_update_index_in_dim(%iterArg_18, %19#1, %iterArg_16) : (tensor<3x2x8xf32>, tensor<2x8xf32>, tensor<i32>) -> tensor<3x2x8xf32>
        %21 = func.call @dynamic_update_index_in_dim_0(%iterArg_19, %19#2, %iterArg_16) : (tensor<3x2x2xf32>, tensor<2x2xf32>, tensor<i32>) -> tensor<3x2x2xf32>
        %22 = func.call @dynamic_update_index_in_dim_1(%iterArg_20, %19#3, %iterArg_16) : (tensor<3x2x8xf32>, tensor<2x8xf32>, tensor<i32>) -> tensor<3x2x8xf32>
        %23 = func.call @dynamic_update_index_in_dim_1(%iterArg_21, %19#4, %iterArg_16) : (tensor<3x2x8xf32>, tensor<2x8xf32>, tensor<i32>) -> tensor<3x2x8xf32>
        %c_22 = stablehlo.constant dense<1> : tensor<i32>
        %24 = stablehlo.add %iterArg_16, %c_22 : tensor<i32>
        stablehlo.return %iterArg, %iterArg_13, %iterArg_14, %iterArg_15, %24, %19#0, %20, %21, %22, %23 : tensor<3x2x8xf32>, tensor<f32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<3x2x8xf32>, tensor<3x2x2xf32>, tensor<3x2x8xf32>, tensor<3x2x8xf32>
      }
      %cst_10 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
      %14 = stablehlo.broadcast_in_dim %cst_10, dims = [] : (tensor<f32>) -> tensor<2x8xf32>
      %cst_11 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %15 = stablehlo.broadcast_in_dim %cst_11, dims = [] : (tensor<f32>) -> tensor<3x2x8xf32>
      %c_12 = stablehlo.constant dense<0> : tensor<i32>
      %16:9 = stablehlo.while(%iterArg = %13#6, %iterArg_13 = %13#7, %iterArg_14 = %13#8, %iterArg_15 = %13#9, %iterArg_16 = %c_4, %iterArg_17 = %8, %iterArg_18 = %c_12, %iterArg_19 = %14, %iterArg_20 = %15) : tensor<3x2x8xf32>, tensor<3x2x2xf32>, tensor<3x2x8xf32>, tensor<3x2x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<3x2x8xf32>
      cond {
        %c_21 = stablehlo.constant dense<3> : tensor<i32>
        %18 = stablehlo.compare LT, %iterArg_18, %c_21, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %18 : tensor<i1>
      } do {
        %c_21 = stablehlo.constant dense<3> : tensor<i32>
        %18 = stablehlo.subtract %c_21, %iterArg_18 : tensor<i32>
        %c_22 = stablehlo.constant dense<1> : tensor<i32>
        %19 = stablehlo.subtract %18, %c_22 : tensor<i32>
        %20 = func.call @dynamic_index_in_dim_2(%iterArg, %19) : (tensor<3x2x8xf32>, tensor<i32>) -> tensor<2x8xf32>
        %21 = func.call @dynamic_index_in_dim_3(%iterArg_13, %19) : (tensor<3x2x2xf32>, tensor<i32>) -> tensor<2x2xf32>
        %22 = func.call @dynamic_index_in_dim_4(%iterArg_14, %19) : (tensor<3x2x8xf32>, tensor<i32>) -> tensor<2x8xf32>
        %23 = func.call @dynamic_index_in_dim_4(%iterArg_15, %19) : (tensor<3x2x8xf32>, tensor<i32>) -> tensor<2x8xf32>
        %24:2 = func.call @closed_call_5(%iterArg_16, %iterArg_17, %iterArg_19, %20, %21, %22, %23) : (tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x2xf32>, tensor<2x8xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>)
        %25 = func.call @dynamic_update_index_in_dim_6(%iterArg_20, %24#1, %19) : (tensor<3x2x8xf32>, tensor<2x8xf32>, tensor<i32>) -> tensor<3x2x8xf32>
        %c_23 = stablehlo.constant dense<1> : tensor<i32>
        %26 = stablehlo.add %iterArg_18, %c_23 : tensor<i32>
        stablehlo.return %iterArg, %iterArg_13, %iterArg_14, %iterArg_15, %iterArg_16, %iterArg_17, %26, %24#0, %25 : tensor<3x2x8xf32>, tensor<3x2x2xf32>, tensor<3x2x8xf32>, tensor<3x2x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<3x2x8xf32>
      }
      %17 = "stablehlo.all_reduce"(%16#8) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %18 = stablehlo.add %arg4, %arg5 : tensor<f32>
        stablehlo.return %18 : tensor<f32>
      }) : (tensor<3x2x8xf32>) -> tensor<3x2x8xf32>
      sdy.return %17 : tensor<3x2x8xf32>
    } : (tensor<3x8x8xf32>, tensor<8x8xf32>) -> tensor<3x8x8xf32>
    return %0 : tensor<3x8x8xf32>
  }
  func.func private @dynamic_index_in_dim(%arg0: tensor<3x2x8xf32>, %arg1: tensor<i32>) -> tensor<2x8xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %arg0, %arg1, %c, %c_0, sizes = [1, 2, 8] : (tensor<3x2x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x2x8xf32>
    %1 = stablehlo.reshape %0 : (tensor<1x2x8xf32>) -> tensor<2x8xf32>
    return %1 : tensor<2x8xf32>
  }
  func.func private @closed_call(%arg0: tensor<f32>, %arg1: tensor<i32>, %arg2: tensor<i32>, %arg3: tensor<2x8xf32>, %arg4: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x2xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
    %0 = stablehlo.dynamic_slice %arg3, %arg1, %arg2, sizes = [2, 2] : (tensor<2x8xf32>, tensor<i32>, tensor<i32>) -> tensor<2x2xf32>
    %1 = stablehlo.dot_general %0, %arg4, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x2xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg5: tensor<f32>, %arg6: tensor<f32>):
      %6 = stablehlo.add %arg5, %arg6 : tensor<f32>
      stablehlo.return %6 : tensor<f32>
    }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %3 = stablehlo.tanh %2 : tensor<2x8xf32>
    %4 = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> tensor<2x8xf32>
    %5 = stablehlo.subtract %4, %3 : tensor<2x8xf32>
    return %3, %arg4, %0, %3, %5 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x2xf32>, tensor<2x8xf32>, tensor<2x8xf32>
  }
  func.func private @dynamic_update_index_in_dim(%arg0: tensor<3x2x8xf32>, %arg1: tensor<2x8xf32>, %arg2: tensor<i32>) -> tensor<3x2x8xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<2x8xf32>) -> tensor<1x2x8xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %arg0, %0, %arg2, %c, %c_0 : (tensor<3x2x8xf32>, tensor<1x2x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x2x8xf32>
    return %1 : tensor<3x2x8xf32>
  }
  func.func private @dynamic_update_index_in_dim_0(%arg0: tensor<3x2x2xf32>, %arg1: tensor<2x2xf32>, %arg2: tensor<i32>) -> tensor<3x2x2xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<2x2xf32>) -> tensor<1x2x2xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %arg0, %0, %arg2, %c, %c_0 : (tensor<3x2x2xf32>, tensor<1x2x2xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x2x2xf32>
    return %1 : tensor<3x2x2xf32>
  }
  func.func private @dynamic_update_index_in_dim_1(%arg0: tensor<3x2x8xf32>, %arg1: tensor<2x8xf32>, %arg2: tensor<i32>) -> tensor<3x2x8xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<2x8xf32>) -> tensor<1x2x8xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %arg0, %0, %arg2, %c, %c_0 : (tensor<3x2x8xf32>, tensor<1x2x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x2x8xf32>
    return %1 : tensor<3x2x8xf32>
  }
  func.func private @dynamic_index_in_dim_2(%arg0: tensor<3x2x8xf32>, %arg1: tensor<i32>) -> tensor<2x8xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %arg0, %arg1, %c, %c_0, sizes = [1, 2, 8] : (tensor<3x2x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x2x8xf32>
    %1 = stablehlo.reshape %0 : (tensor<1x2x8xf32>) -> tensor<2x8xf32>
    return %1 : tensor<2x8xf32>
  }
  func.func private @dynamic_index_in_dim_3(%arg0: tensor<3x2x2xf32>, %arg1: tensor<i32>) -> tensor<2x2xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %arg0, %arg1, %c, %c_0, sizes = [1, 2, 2] : (tensor<3x2x2xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x2x2xf32>
    %1 = stablehlo.reshape %0 : (tensor<1x2x2xf32>) -> tensor<2x2xf32>
    return %1 : tensor<2x2xf32>
  }
  func.func private @dynamic_index_in_dim_4(%arg0: tensor<3x2x8xf32>, %arg1: tensor<i32>) -> tensor<2x8xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %arg0, %arg1, %c, %c_0, sizes = [1, 2, 8] : (tensor<3x2x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x2x8xf32>
    %1 = stablehlo.reshape %0 : (tensor<1x2x8xf32>) -> tensor<2x8xf32>
    return %1 : tensor<2x8xf32>
  }
  func.func private @closed_call_5(%arg0: tensor<i32>, %arg1: tensor<i32>, %arg2: tensor<2x8xf32>, %arg3: tensor<2x8xf32>, %arg4: tensor<2x2xf32>, %arg5: tensor<2x8xf32>, %arg6: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
    %0 = stablehlo.multiply %arg2, %arg6 : tensor<2x8xf32>
    %1 = stablehlo.multiply %0, %arg5 : tensor<2x8xf32>
    %2 = stablehlo.add %0, %1 : tensor<2x8xf32>
    %3 = stablehlo.dot_general %2, %arg4, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<2x2xf32>) -> tensor<8x2xf32>
    %4 = stablehlo.transpose %3, dims = [1, 0] : (tensor<8x2xf32>) -> tensor<2x8xf32>
    %5 = stablehlo.dot_general %2, %arg3, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x2xf32>
    %6 = "stablehlo.all_reduce"(%4) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg7: tensor<f32>, %arg8: tensor<f32>):
      %10 = stablehlo.add %arg7, %arg8 : tensor<f32>
      stablehlo.return %10 : tensor<f32>
    }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %7 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x8xf32>
    %8 = stablehlo.dynamic_update_slice %7, %5, %arg0, %arg1 : (tensor<2x8xf32>, tensor<2x2xf32>, tensor<i32>, tensor<i32>) -> tensor<2x8xf32>
    %9 = "stablehlo.all_reduce"(%8) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg7: tensor<f32>, %arg8: tensor<f32>):
      %10 = stablehlo.add %arg7, %arg8 : tensor<f32>
      stablehlo.return %10 : tensor<f32>
    }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    return %9, %6 : tensor<2x8xf32>, tensor<2x8xf32>
  }
  func.func private @dynamic_update_index_in_dim_6(%arg0: tensor<3x2x8xf32>, %arg1: tensor<2x8xf32>, %arg2: tensor<i32>) -> tensor<3x2x8xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<2x8xf32>) -> tensor<1x2x8xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %arg0, %0, %arg2, %c, %c_0 : (tensor<3x2x8xf32>, tensor<1x2x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x2x8xf32>
    return %1 : tensor<3x2x8xf32>
  }
}
