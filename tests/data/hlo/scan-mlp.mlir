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
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %9 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<3x2x2xf32>
      %cst_4 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %10 = stablehlo.broadcast_in_dim %cst_4, dims = [] : (tensor<f32>) -> tensor<3x2x8xf32>
      %cst_5 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %11 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<3x2x8xf32>
      %c_6 = stablehlo.constant dense<0> : tensor<i32>
      %12:7 = stablehlo.while(%iterArg = %arg2, %iterArg_10 = %8, %iterArg_11 = %c_6, %iterArg_12 = %arg3, %iterArg_13 = %9, %iterArg_14 = %10, %iterArg_15 = %11) : tensor<3x2x8xf32>, tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<3x2x2xf32>, tensor<3x2x8xf32>, tensor<3x2x8xf32>
      cond {
        %c_16 = stablehlo.constant dense<3> : tensor<i32>
        %17 = stablehlo.compare LT, %iterArg_11, %c_16, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %17 : tensor<i1>
      } do {
        %17 = func.call @dynamic_index_in_dim(%iterArg, %iterArg_11) : (tensor<3x2x8xf32>, tensor<i32>) -> tensor<2x8xf32>
        %18:4 = func.call @closed_call(%iterArg_10, %iterArg_12, %17) : (tensor<i32>, tensor<2x8xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x2xf32>, tensor<2x8xf32>, tensor<2x8xf32>)
        %19 = func.call @dynamic_update_index_in_dim(%iterArg_13, %18#1, %iterArg_11) : (tensor<3x2x2xf32>, tensor<2x2xf32>, tensor<i32>) -> tensor<3x2x2xf32>
        %20 = func.call @dynamic_update_index_in_dim_0(%iterArg_14, %18#2, %iterArg_11) : (tensor<3x2x8xf32>, tensor<2x8xf32>, tensor<i32>) -> tensor<3x2x8xf32>
        %21 = func.call @dynamic_update_index_in_dim_0(%iterArg_15, %18#3, %iterArg_11) : (tensor<3x2x8xf32>, tensor<2x8xf32>, tensor<i32>) -> tensor<3x2x8xf32>
        %c_16 = stablehlo.constant dense<1> : tensor<i32>
        %22 = stablehlo.add %iterArg_11, %c_16 : tensor<i32>
        stablehlo.return %iterArg, %iterArg_10, %22, %18#0, %19, %20, %21 : tensor<3x2x8xf32>, tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<3x2x2xf32>, tensor<3x2x8xf32>, tensor<3x2x8xf32>
      }
      %cst_7 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
      %13 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<2x8xf32>
      %cst_8 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %14 = stablehlo.broadcast_in_dim %cst_8, dims = [] : (tensor<f32>) -> tensor<3x2x8xf32>
      %c_9 = stablehlo.constant dense<0> : tensor<i32>
      %15:8 = stablehlo.while(%iterArg = %arg2, %iterArg_10 = %12#4, %iterArg_11 = %12#5, %iterArg_12 = %12#6, %iterArg_13 = %8, %iterArg_14 = %c_9, %iterArg_15 = %13, %iterArg_16 = %14) : tensor<3x2x8xf32>, tensor<3x2x2xf32>, tensor<3x2x8xf32>, tensor<3x2x8xf32>, tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<3x2x8xf32>
      cond {
        %c_17 = stablehlo.constant dense<3> : tensor<i32>
        %17 = stablehlo.compare LT, %iterArg_14, %c_17, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %17 : tensor<i1>
      } do {
        %c_17 = stablehlo.constant dense<3> : tensor<i32>
        %17 = stablehlo.subtract %c_17, %iterArg_14 : tensor<i32>
        %c_18 = stablehlo.constant dense<1> : tensor<i32>
        %18 = stablehlo.subtract %17, %c_18 : tensor<i32>
        %19 = func.call @dynamic_index_in_dim(%iterArg, %18) : (tensor<3x2x8xf32>, tensor<i32>) -> tensor<2x8xf32>
        %20 = func.call @dynamic_index_in_dim_1(%iterArg_10, %18) : (tensor<3x2x2xf32>, tensor<i32>) -> tensor<2x2xf32>
        %21 = func.call @dynamic_index_in_dim(%iterArg_11, %18) : (tensor<3x2x8xf32>, tensor<i32>) -> tensor<2x8xf32>
        %22 = func.call @dynamic_index_in_dim(%iterArg_12, %18) : (tensor<3x2x8xf32>, tensor<i32>) -> tensor<2x8xf32>
        %23:2 = func.call @closed_call_2(%iterArg_13, %iterArg_15, %19, %20, %21, %22) : (tensor<i32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x2xf32>, tensor<2x8xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>)
        %24 = func.call @dynamic_update_index_in_dim_0(%iterArg_16, %23#1, %18) : (tensor<3x2x8xf32>, tensor<2x8xf32>, tensor<i32>) -> tensor<3x2x8xf32>
        %c_19 = stablehlo.constant dense<1> : tensor<i32>
        %25 = stablehlo.add %iterArg_14, %c_19 : tensor<i32>
        stablehlo.return %iterArg, %iterArg_10, %iterArg_11, %iterArg_12, %iterArg_13, %25, %23#0, %24 : tensor<3x2x8xf32>, tensor<3x2x2xf32>, tensor<3x2x8xf32>, tensor<3x2x8xf32>, tensor<i32>, tensor<i32>, tensor<2x8xf32>, tensor<3x2x8xf32>
      }
      %16 = "stablehlo.all_reduce"(%15#7) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
      ^bb0(%arg4: tensor<f32>, %arg5: tensor<f32>):
        %17 = stablehlo.add %arg4, %arg5 : tensor<f32>
        stablehlo.return %17 : tensor<f32>
      }) : (tensor<3x2x8xf32>) -> tensor<3x2x8xf32>
      sdy.return %16 : tensor<3x2x8xf32>
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
  func.func private @closed_call(%arg0: tensor<i32>, %arg1: tensor<2x8xf32>, %arg2: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x2xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %arg1, %c, %arg0, sizes = [2, 2] : (tensor<2x8xf32>, tensor<i32>, tensor<i32>) -> tensor<2x2xf32>
    %1 = stablehlo.dot_general %0, %arg2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x2xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg3: tensor<f32>, %arg4: tensor<f32>):
      %6 = stablehlo.add %arg3, %arg4 : tensor<f32>
      stablehlo.return %6 : tensor<f32>
    }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %3 = stablehlo.tanh %2 : tensor<2x8xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %4 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x8xf32>
    %5 = stablehlo.subtract %4, %3 : tensor<2x8xf32>
    return %3, %0, %3, %5 : tensor<2x8xf32>, tensor<2x2xf32>, tensor<2x8xf32>, tensor<2x8xf32>
  }
  func.func private @dynamic_update_index_in_dim(%arg0: tensor<3x2x2xf32>, %arg1: tensor<2x2xf32>, %arg2: tensor<i32>) -> tensor<3x2x2xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<2x2xf32>) -> tensor<1x2x2xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %arg0, %0, %arg2, %c, %c_0 : (tensor<3x2x2xf32>, tensor<1x2x2xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x2x2xf32>
    return %1 : tensor<3x2x2xf32>
  }
  func.func private @dynamic_update_index_in_dim_0(%arg0: tensor<3x2x8xf32>, %arg1: tensor<2x8xf32>, %arg2: tensor<i32>) -> tensor<3x2x8xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<2x8xf32>) -> tensor<1x2x8xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %arg0, %0, %arg2, %c, %c_0 : (tensor<3x2x8xf32>, tensor<1x2x8xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x2x8xf32>
    return %1 : tensor<3x2x8xf32>
  }
  func.func private @dynamic_index_in_dim_1(%arg0: tensor<3x2x2xf32>, %arg1: tensor<i32>) -> tensor<2x2xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %arg0, %arg1, %c, %c_0, sizes = [1, 2, 2] : (tensor<3x2x2xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x2x2xf32>
    %1 = stablehlo.reshape %0 : (tensor<1x2x2xf32>) -> tensor<2x2xf32>
    return %1 : tensor<2x2xf32>
  }
  func.func private @closed_call_2(%arg0: tensor<i32>, %arg1: tensor<2x8xf32>, %arg2: tensor<2x8xf32>, %arg3: tensor<2x2xf32>, %arg4: tensor<2x8xf32>, %arg5: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
    %0 = stablehlo.multiply %arg1, %arg5 : tensor<2x8xf32>
    %1 = stablehlo.multiply %0, %arg4 : tensor<2x8xf32>
    %2 = stablehlo.add %0, %1 : tensor<2x8xf32>
    %3 = "stablehlo.all_reduce"(%2) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]> : tensor<4x4xi64>, use_global_device_ids}> ({
    ^bb0(%arg6: tensor<f32>, %arg7: tensor<f32>):
      %9 = stablehlo.add %arg6, %arg7 : tensor<f32>
      stablehlo.return %9 : tensor<f32>
    }) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    %4 = stablehlo.dot_general %3, %arg3, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<2x2xf32>) -> tensor<8x2xf32>
    %5 = stablehlo.transpose %4, dims = [1, 0] : (tensor<8x2xf32>) -> tensor<2x8xf32>
    %6 = stablehlo.dot_general %3, %arg2, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x2xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %7 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<2x8xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %8 = stablehlo.dynamic_update_slice %7, %6, %c, %arg0 : (tensor<2x8xf32>, tensor<2x2xf32>, tensor<i32>, tensor<i32>) -> tensor<2x8xf32>
    return %8, %5 : tensor<2x8xf32>, tensor<2x8xf32>
  }
}
